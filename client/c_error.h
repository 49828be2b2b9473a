// How libptcfs_client's C functions (client/ptcfs_client.h) report an error: the message,
// "code: words", cut to fit the caller's buffer `err` of `errlen` bytes (NULL: none).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

namespace ptcfs::client {

inline void set_error(char* err, size_t errlen, const std::string& message) {
  if (!err || errlen == 0) return;
  const size_t n = std::min(errlen - 1, message.size());
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

}  // namespace ptcfs::client
