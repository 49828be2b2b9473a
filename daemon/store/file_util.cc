#include "daemon/store/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ptcfs {

Result<File> File::open_read(const std::string& path) {
  // O_NONBLOCK: opening a FIFO (or a device) for reading would otherwise wait for a writer,
  // forever, holding the change's claim; it is refused below instead. On a regular file the
  // flag does nothing, and it is cleared all the same.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path + ": no such file");
    return io_error("opening " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid(path + ": not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("opening " + path, err);
  }
  return File(fd, path);
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

Result<uint64_t> File::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return io_error("stat " + path_, errno);
  return static_cast<uint64_t>(st.st_size);
}

Result<int64_t> File::mtime_ns() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return io_error("stat " + path_, errno);
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

Result<size_t> read_full(int fd, uint64_t offset, void* buf, size_t len, const std::string& what) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd, static_cast<char*>(buf) + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("reading " + what, errno);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

Result<size_t> File::read_at(uint64_t offset, void* buf, size_t len) const {
  return read_full(fd_, offset, buf, len, path_);
}

Result<std::vector<std::string>> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return not_found(dir + ": no such directory");
    return io_error("listing " + dir, errno);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::string> read_small_file(const std::string& path, uint64_t max_bytes) {
  PTC_ASSIGN_OR_RETURN(File f, File::open_read(path));
  PTC_ASSIGN_OR_RETURN(uint64_t size, f.size());
  if (size > max_bytes) return invalid(path + ": larger than " + std::to_string(max_bytes) + " bytes");
  std::string s(size, '\0');
  PTC_ASSIGN_OR_RETURN(size_t got, f.read_at(0, s.data(), size));
  s.resize(got);
  return s;
}

Status sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("opening " + dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return io_error("syncing " + dir, err);
  return Status::ok();
}

}  // namespace ptcfs
