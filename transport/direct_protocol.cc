#include "transport/direct_protocol.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ptc/base/endian.h"

namespace ptcfs::transport::direct {

namespace {

constexpr char kMagic[4] = {'P', 'T', 'C', 'D'};
constexpr size_t kHeader = 16;
constexpr size_t kFdsPerMessage = 250;  // under SCM_MAX_FD (253)

// Sends `len` bytes with up to kFdsPerMessage descriptors attached to them.
Status send_with_fds(int sock, const char* data, size_t len, const int* fds, size_t nfds) {
  size_t done = 0;
  while (done < len) {
    iovec iov{const_cast<char*>(data + done), len - done};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    std::vector<char> control;
    if (nfds > 0 && done == 0) {
      control.assign(CMSG_SPACE(sizeof(int) * nfds), 0);
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("sending on the direct socket", errno);
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

// Receives exactly `len` bytes; descriptors that come with them are appended to `fds`.
// `eof_ok`: a close before the first byte is kUnavailable.
Status recv_exact(int sock, char* data, size_t len, std::vector<int>& fds, size_t max_fds, bool eof_ok) {
  size_t done = 0;
  while (done < len) {
    iovec iov{data + done, len - done};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdsPerMessage)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("reading the direct socket", errno);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
    }
    if (msg.msg_flags & MSG_CTRUNC) {  // the kernel dropped descriptors: too many, or no room for them here
      rlimit lim{};
      ::getrlimit(RLIMIT_NOFILE, &lim);
      return error(Code::kResourceExhausted,
                   "direct socket: the descriptors of the file's blobs did not all arrive: this process may be "
                   "at its limit of open files (" +
                       std::to_string(lim.rlim_cur) +
                       "; each open direct file holds one per blob it maps: close some, or raise the limit)");
    }
    if (fds.size() > max_fds) return invalid("direct socket: more descriptors than announced");
    if (n == 0) {
      if (done == 0 && eof_ok) return unavailable("the direct socket's peer closed the connection");
      return invalid("direct socket: the connection ended inside a message");
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

void close_all(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

// A sockaddr_un for `path`; a path too long for it goes through /proc/self/fd/<dirfd>.
Result<sockaddr_un> address(const std::string& path, int& dirfd) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string p = path;
  if (p.size() >= sizeof addr.sun_path) {
    const size_t slash = p.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : p.substr(0, slash == 0 ? 1 : slash);
    dirfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) return io_error("opening " + dir, errno);
    p = "/proc/self/fd/" + std::to_string(dirfd) + "/" + p.substr(slash + 1);
    if (p.size() >= sizeof addr.sun_path) return invalid("socket name too long: " + path);
  }
  std::memcpy(addr.sun_path, p.c_str(), p.size() + 1);
  return addr;
}

}  // namespace

Status send_message(int sock, const std::string& json, const std::string& binary, const std::vector<int>& fds) {
  char header[kHeader];
  std::memcpy(header, kMagic, 4);
  store_le<uint32_t>(header + 4, static_cast<uint32_t>(json.size()));
  store_le<uint32_t>(header + 8, static_cast<uint32_t>(binary.size()));
  store_le<uint32_t>(header + 12, static_cast<uint32_t>(fds.size()));
  if (binary.size() > UINT32_MAX || json.size() > UINT32_MAX) return invalid("direct socket: message too large");
  const size_t first = std::min(fds.size(), kFdsPerMessage);
  PTC_RETURN_IF_ERROR(send_with_fds(sock, header, kHeader, fds.data(), first));
  for (size_t at = first; at < fds.size(); at += kFdsPerMessage) {
    const char one = 'F';
    PTC_RETURN_IF_ERROR(send_with_fds(sock, &one, 1, fds.data() + at, std::min(kFdsPerMessage, fds.size() - at)));
  }
  PTC_RETURN_IF_ERROR(send_with_fds(sock, json.data(), json.size(), nullptr, 0));
  return send_with_fds(sock, binary.data(), binary.size(), nullptr, 0);
}

Result<Message> recv_message(int sock, const Limits& limits) {
  Message m;
  char header[kHeader];
  auto fail = [&](Status s) -> Result<Message> {
    close_all(m.fds);
    return s;
  };
  if (auto s = recv_exact(sock, header, kHeader, m.fds, kFdsPerMessage, true); !s) return fail(s);
  if (std::memcmp(header, kMagic, 4) != 0) return fail(invalid("direct socket: not a ptcfs message"));
  const uint32_t json_len = load_le<uint32_t>(header + 4), bin_len = load_le<uint32_t>(header + 8),
                 nfds = load_le<uint32_t>(header + 12);
  if (json_len > limits.max_json || bin_len > limits.max_binary || nfds > limits.max_fds)
    return fail(invalid("direct socket: message larger than allowed (" + std::to_string(json_len) + " bytes of JSON, " +
                        std::to_string(bin_len) + " binary, " + std::to_string(nfds) + " descriptors)"));
  while (m.fds.size() < nfds) {
    char one;
    if (auto s = recv_exact(sock, &one, 1, m.fds, nfds, false); !s) return fail(s);
  }
  if (m.fds.size() != nfds) return fail(invalid("direct socket: descriptors missing from a message"));
  m.json.resize(json_len);
  if (auto s = recv_exact(sock, m.json.data(), json_len, m.fds, nfds, false); !s) return fail(s);
  m.binary.resize(bin_len);
  if (auto s = recv_exact(sock, m.binary.data(), bin_len, m.fds, nfds, false); !s) return fail(s);
  return m;
}

std::string encode_spans(const std::vector<Span>& spans) {
  std::string out(spans.size() * kSpanBytes, '\0');
  char* p = out.data();
  for (const auto& s : spans) {
    store_le<uint32_t>(p, static_cast<uint32_t>(s.src));
    store_le<uint32_t>(p + 4, 0);
    store_le<uint64_t>(p + 8, s.off);
    store_le<uint64_t>(p + 16, s.len);
    p += kSpanBytes;
  }
  return out;
}

Result<std::vector<Span>> decode_spans(const std::string& binary, size_t nfds) {
  if (binary.size() % kSpanBytes) return invalid("direct socket: the file map is cut short");
  std::vector<Span> out(binary.size() / kSpanBytes);
  const char* p = binary.data();
  for (auto& s : out) {
    s.src = static_cast<int32_t>(load_le<uint32_t>(p));
    s.off = load_le<uint64_t>(p + 8);
    s.len = load_le<uint64_t>(p + 16);
    if (s.src != kZeros && (s.src < 0 || static_cast<size_t>(s.src) >= nfds))
      return invalid("direct socket: a span names descriptor " + std::to_string(s.src) + " of " + std::to_string(nfds));
    if (s.off + s.len < s.off) return invalid("direct socket: a span overflows");
    p += kSpanBytes;
  }
  return out;
}

void RunMap::add(int32_t src, uint64_t off, uint64_t len) {
  if (len == 0) return;
  if (src == kZeros) off = 0;
  size_ += len;
  if (!runs_.empty() && runs_.back().rows == 1 && runs_.back().count == 1) {
    Piece& last = pieces_.back();
    if (last.src == src && (src == kZeros || last.off + last.len == off)) {
      last.len += len;
      last.stride = last.len;
      return;
    }
  }
  runs_.push_back(Run{1, static_cast<uint32_t>(pieces_.size()), 1});
  pieces_.push_back(Piece{src, off, len, len});
}

void RunMap::add_rows(uint64_t rows, const std::vector<Piece>& pieces_arg) {
  std::vector<Piece> pieces;
  pieces.reserve(pieces_arg.size());
  uint64_t row = 0;
  for (const Piece& p : pieces_arg) {
    if (p.len == 0) continue;
    pieces.push_back(p);
    if (p.src == kZeros) pieces.back().off = pieces.back().stride = 0;
    row += p.len;
  }
  if (rows == 0 || pieces.empty()) return;
  // Zeros, or pieces back to back in one descriptor (each continues the one before, and each row
  // the row before): one span.
  bool flat = true;
  for (size_t j = 0; j < pieces.size() && flat; ++j) {
    const Piece& p = pieces[j];
    flat = p.src == pieces[0].src && (p.src == kZeros || ((rows == 1 || p.stride == row) &&
                                                          (j == 0 || p.off == pieces[j - 1].off + pieces[j - 1].len)));
  }
  if (flat) {
    add(pieces[0].src, pieces[0].off, rows * row);
    return;
  }
  if (rows == 1) {
    for (const Piece& p : pieces) add(p.src, p.off, p.len);
    return;
  }
  runs_.push_back(Run{rows, static_cast<uint32_t>(pieces_.size()), static_cast<uint32_t>(pieces.size())});
  pieces_.insert(pieces_.end(), pieces.begin(), pieces.end());
  size_ += rows * row;
}

std::vector<Span> RunMap::spans() const {
  std::vector<Span> out;
  auto add = [&](int32_t src, uint64_t off, uint64_t len) {
    if (!out.empty() && out.back().src == src && (src == kZeros || out.back().off + out.back().len == off)) {
      out.back().len += len;
      return;
    }
    out.push_back(Span{src, off, len});
  };
  for (const Run& r : runs_)
    for (uint64_t row = 0; row < r.rows; ++row)
      for (uint32_t j = r.first; j < r.first + r.count; ++j) {
        const Piece& p = pieces_[j];
        add(p.src, p.src == kZeros ? 0 : p.off + row * p.stride, p.len);
      }
  return out;
}

std::string encode_runs(const RunMap& map) {
  std::string out(map.runs().size() * kRunBytes + map.pieces().size() * kPieceBytes, '\0');
  char* p = out.data();
  for (const auto& r : map.runs()) {
    store_le<uint64_t>(p, r.rows);
    store_le<uint32_t>(p + 8, r.count);
    store_le<uint32_t>(p + 12, 0);
    p += kRunBytes;
    for (uint32_t j = r.first; j < r.first + r.count; ++j) {
      const Piece& s = map.pieces()[j];
      store_le<uint32_t>(p, static_cast<uint32_t>(s.src));
      store_le<uint32_t>(p + 4, 0);
      store_le<uint64_t>(p + 8, s.off);
      store_le<uint64_t>(p + 16, s.len);
      store_le<uint64_t>(p + 24, s.stride);
      p += kPieceBytes;
    }
  }
  return out;
}

Result<RunMap> decode_runs(const std::string& binary, size_t nfds) {
  RunMap m;
  const char* p = binary.data();
  const char* end = p + binary.size();
  while (p < end) {
    if (static_cast<size_t>(end - p) < kRunBytes) return invalid("direct socket: the file map is cut short");
    const uint64_t rows = load_le<uint64_t>(p);
    const uint32_t count = load_le<uint32_t>(p + 8);
    p += kRunBytes;
    if (rows == 0 || count == 0) return invalid("direct socket: a run of the file map has no rows or no pieces");
    if (static_cast<size_t>(end - p) / kPieceBytes < count) return invalid("direct socket: the file map is cut short");
    uint64_t row = 0;
    const size_t first = m.pieces_.size();
    for (uint32_t j = 0; j < count; ++j, p += kPieceBytes) {
      Piece s;
      s.src = static_cast<int32_t>(load_le<uint32_t>(p));
      s.off = load_le<uint64_t>(p + 8);
      s.len = load_le<uint64_t>(p + 16);
      s.stride = load_le<uint64_t>(p + 24);
      if (s.src != kZeros && (s.src < 0 || static_cast<size_t>(s.src) >= nfds))
        return invalid("direct socket: a span names descriptor " + std::to_string(s.src) + " of " +
                       std::to_string(nfds));
      // The last row's piece ends at off + (rows - 1) * stride + len: in 64 bits.
      uint64_t last = 0, piece_end = 0;
      if (s.src != kZeros &&
          (__builtin_mul_overflow(rows - 1, s.stride, &last) || __builtin_add_overflow(s.off, last, &last) ||
           __builtin_add_overflow(last, s.len, &piece_end)))
        return invalid("direct socket: a span overflows");
      if (__builtin_add_overflow(row, s.len, &row)) return invalid("direct socket: a span overflows");
      m.pieces_.push_back(s);
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(rows, row, &bytes) || __builtin_add_overflow(m.size_, bytes, &m.size_))
      return invalid("direct socket: the file map's size overflows");
    m.runs_.push_back(RunMap::Run{rows, static_cast<uint32_t>(first), count});
  }
  return m;
}

Result<int> listen_unix(const std::string& path, int backlog) {
  int dirfd = -1;
  auto addr = address(path, dirfd);
  if (!addr) return addr.status();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  Status st;
  if (fd < 0) {
    st = io_error("creating a Unix socket", errno);
  } else {
    ::unlink(addr->sun_path);  // a socket left by a daemon that died
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) != 0)
      st = io_error("binding the direct socket " + path, errno);
    else if (::listen(fd, backlog) != 0)
      st = io_error("listening on " + path, errno);
  }
  if (dirfd >= 0) ::close(dirfd);
  if (!st) {
    if (fd >= 0) ::close(fd);
    return st;
  }
  return fd;
}

Result<int> connect_unix(const std::string& path) {
  int dirfd = -1;
  auto addr = address(path, dirfd);
  if (!addr) return addr.status();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  Status st;
  if (fd < 0)
    st = io_error("creating a Unix socket", errno);
  else if (::connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) != 0)
    st = error(errno == ENOENT || errno == ECONNREFUSED ? Code::kUnavailable
               : errno == EACCES                        ? Code::kPermissionDenied
                                                        : Code::kIo,
               "connecting to the direct socket " + path + ": " + std::strerror(errno));
  if (dirfd >= 0) ::close(dirfd);
  if (!st) {
    if (fd >= 0) ::close(fd);
    return st;
  }
  return fd;
}

}  // namespace ptcfs::transport::direct
