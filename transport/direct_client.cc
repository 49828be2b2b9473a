#include "transport/direct_client.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "transport/direct_protocol.h"

namespace ptcfs::client {

namespace direct = transport::direct;
using nlohmann::json;

namespace {

constexpr const char* kDirectName = ".ptcfs-direct";  // fs/tree.h

ptc::Result<std::string> absolute(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf))
    return ptc::error(errno == ENOENT ? ptc::Code::kNotFound : ptc::Code::kIo, path + ": " + std::strerror(errno));
  return std::string(buf);
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

}  // namespace

ptc::Result<std::string> find_socket(const std::string& path_arg) {
  if (const char* env = std::getenv("PTCFS_DIRECT_SOCKET"); env && *env) return std::string(env);
  PTC_ASSIGN_OR_RETURN(const std::string path, absolute(path_arg));
  // The mount's root: the last folder up from the path on the same device.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ptc::io_error(path, errno);
  std::string root = path;
  for (;;) {
    const size_t slash = root.rfind('/');
    if (slash == std::string::npos || root == "/") break;
    const std::string up = slash == 0 ? "/" : root.substr(0, slash);
    struct stat ust {};
    if (::stat(up.c_str(), &ust) != 0 || ust.st_dev != st.st_dev) break;
    root = up;
  }
  const std::string file = (root == "/" ? "" : root) + "/" + kDirectName;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ptc::unavailable("no direct socket serves " + path + " (not a ptcfs mount, or its daemon runs without one)");
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return ptc::unavailable("no direct socket serves " + path + " (" + file + " is empty)");
  return std::string(buf, static_cast<size_t>(n));
}

ptc::Result<std::unique_ptr<DirectFile>> DirectFile::open(const std::string& path_arg, const std::string& socket_arg) {
  PTC_ASSIGN_OR_RETURN(const std::string path, absolute(path_arg));
  std::string socket = socket_arg;
  if (socket.empty()) {
    PTC_ASSIGN_OR_RETURN(socket, find_socket(path));
  }
  std::unique_ptr<DirectFile> f(new DirectFile);
  PTC_ASSIGN_OR_RETURN(f->sock_, direct::connect_unix(socket));
  // A refused client (another uid, too many connections) may find the connection closed
  // before its request goes out: the daemon's answer, read next, says why.
  const ptc::Status sent = direct::send_message(f->sock_, json{{"op", "open"}, {"path", path}}.dump(), {}, {});
  auto reply = direct::recv_message(f->sock_);
  if (!reply) return (sent ? reply.status() : sent).with_context("opening " + path + " through " + socket);
  const std::vector<int> fds = reply->fds;
  const json j = json::parse(reply->json, nullptr, false);
  if (!j.is_object() || !j.contains("ok")) {
    close_all(fds);
    return ptc::invalid("opening " + path + ": the daemon's reply is malformed");
  }
  if (!j.value("ok", false)) {
    close_all(fds);
    return ptc::error(ptc::code_from_name(j.value("code", std::string("internal"))), j.value("error", std::string()));
  }
  f->size_ = j.value("size", uint64_t{0});
  f->version_ = j.value("version", uint64_t{0});
  auto spans = direct::decode_spans(reply->binary, fds.size());
  if (!spans) {
    close_all(fds);
    return spans.status().with_context("opening " + path);
  }
  // Every span must lie inside its file before anything is mapped: a file cut short would
  // give SIGBUS on first touch.
  std::vector<uint64_t> sizes(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    struct stat st {};
    if (::fstat(fds[i], &st) != 0) {
      close_all(fds);
      return ptc::io_error("opening " + path + ": fstat of a descriptor from the daemon", errno);
    }
    sizes[i] = static_cast<uint64_t>(st.st_size);
  }
  uint64_t total = 0;
  for (const auto& s : *spans) {
    total += s.len;
    if (s.src != direct::kZeros && s.off + s.len > sizes[static_cast<size_t>(s.src)]) {
      close_all(fds);
      return ptc::corrupt("opening " + path + ": a file holding its bytes has " + std::to_string(sizes[s.src]) +
                          " bytes, the map reads up to " + std::to_string(s.off + s.len) +
                          " (a blob cut short behind the daemon's back?)");
    }
  }
  if (total != f->size_) {
    close_all(fds);
    return ptc::invalid("opening " + path + ": the map covers " + std::to_string(total) + " of " +
                        std::to_string(f->size_) + " bytes");
  }
  std::vector<std::byte*> base(fds.size(), nullptr);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (sizes[i] == 0) continue;
    void* m = ::mmap(nullptr, sizes[i], PROT_READ | PROT_WRITE, MAP_PRIVATE, fds[i], 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      close_all(fds);
      return ptc::io_error("opening " + path + ": mapping a file from the daemon", err);
    }
    f->maps_.emplace_back(m, sizes[i]);
    base[i] = static_cast<std::byte*>(m);
  }
  close_all(fds);  // the mappings keep the files
  uint64_t at = 0;
  for (const auto& s : *spans) {
    f->spans_.push_back(Span{s.src == direct::kZeros ? nullptr : base[static_cast<size_t>(s.src)] + s.off, s.len,
                             s.src == direct::kZeros ? 0u : static_cast<uint32_t>(s.src)});
    f->starts_.push_back(at);
    at += s.len;
  }
  return f;
}

DirectFile::~DirectFile() {
  for (auto [p, n] : maps_) ::munmap(p, n);
  if (sock_ >= 0) ::close(sock_);  // the daemon lets the version go
}

const std::byte* DirectFile::contiguous(uint64_t off, uint64_t len) const {
  if (spans_.empty() || off > size_ || len > size_ - off) return nullptr;
  const size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), off) - starts_.begin()) - 1;
  const Span& s = spans_[i];
  if (!s.data || off + len > starts_[i] + s.len) return nullptr;
  return s.data + (off - starts_[i]);
}

ptc::Status DirectFile::read(uint64_t off, uint64_t len, void* dst_arg) const {
  if (off > size_ || len > size_ - off)
    return ptc::error(ptc::Code::kOutOfRange, "read of [" + std::to_string(off) + ", +" + std::to_string(len) +
                                                  ") past the end of a " + std::to_string(size_) + "-byte file");
  auto* dst = static_cast<std::byte*>(dst_arg);
  if (len == 0) return ptc::Status::ok();
  size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), off) - starts_.begin()) - 1;
  for (; len > 0; ++i) {
    const Span& s = spans_[i];
    const uint64_t in = off - starts_[i];
    const uint64_t n = std::min(len, s.len - in);
    if (s.data)
      std::memcpy(dst, s.data + in, n);
    else
      std::memset(dst, 0, n);
    dst += n;
    off += n;
    len -= n;
  }
  return ptc::Status::ok();
}

ptc::Result<const std::byte*> DirectFile::bytes() {
  if (spans_.size() == 1 && spans_[0].data) return spans_[0].data;
  if (gathered_.size() != size_) {
    gathered_.resize(size_);
    PTC_RETURN_IF_ERROR(read(0, size_, gathered_.data()));
  }
  return gathered_.data();
}

}  // namespace ptcfs::client
