// The files of a committed step as the daemon's mount shows them, open at once (cli/export_cmd.cc
// and cli/export_s3.cc write them out): ptc.json and every rank file of the layout it states.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::cli {

// An open file descriptor, closed on destruction.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  Fd(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// A file of the step, open, and its size.
struct OpenFile {
  std::string name;
  Fd fd;
  uint64_t size = 0;
};

// The step's ptc.json and every rank file of the layout it states, all open before a byte is
// copied: an open view keeps the version it opened, whatever commits meanwhile. Each rank file's
// header is checked against that layout; a repartition that switched the mount between two opens
// is retried (5 times, 200 ms apart) rather than written out as a mix of two layouts. Sorted by name.
Result<std::vector<OpenFile>> open_step_files(const std::string& dir);

// Every regular file directly in `dir` (a view folder of the step: hf/, dcp/), all open at once and
// sorted by name; opened again (5 tries) when the folder's names changed meanwhile (a repartition that
// changed tp or pp: the view's names follow its shards).
Result<std::vector<OpenFile>> open_view_files(const std::string& dir);

}  // namespace ptcfs::cli
