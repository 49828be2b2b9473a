// Small POSIX file helpers that return Status instead of errno.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs {

// An owned read-only file descriptor.
class File {
 public:
  static Result<File> open_read(const std::string& path);
  File(File&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  File(const File&) = delete;
  ~File();
  int fd() const { return fd_; }
  Result<uint64_t> size() const;
  // Last modification, in nanoseconds since the epoch.
  Result<int64_t> mtime_ns() const;
  const std::string& path() const { return path_; }
  // Reads up to len bytes at offset; fewer only at end of file.
  Result<size_t> read_at(uint64_t offset, void* buf, size_t len) const;

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

// pread until `len` bytes or the end of the file; retries EINTR. `what` names the file in errors.
Result<size_t> read_full(int fd, uint64_t offset, void* buf, size_t len, const std::string& what);

// Names in a directory (not "." or ".."), sorted.
Result<std::vector<std::string>> list_dir(const std::string& dir);
// The whole file; kInvalidArgument when larger than max_bytes.
Result<std::string> read_small_file(const std::string& path, uint64_t max_bytes);
Status sync_dir(const std::string& dir);

}  // namespace ptcfs
