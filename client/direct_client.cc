#include "client/direct_client.h"

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

Result<std::string> absolute(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf))
    return error(errno == ENOENT ? Code::kNotFound : Code::kIo, path + ": " + std::strerror(errno));
  return std::string(buf);
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Destinations of at least two chunks in all (one range, or ranges whose destinations follow one
// another in one buffer, as a shard's gathered tensors) are copied a chunk at a time, the chunk's
// pages populated first in one call: a fresh buffer (a new bytes object of a whole file) then takes
// no page fault per page, 1.3-2x faster here; pages already there cost a page-table walk. An older
// kernel refuses the advice (EINVAL), and the copy faults the pages in as before.
constexpr uint64_t kPopulateChunk = uint64_t{2} << 20;
// Destinations "follow one another" when each starts less than this past the end of the last.
constexpr uintptr_t kStreamGap = 4096;

void populate(std::byte* p, uint64_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
}

}  // namespace

Result<std::string> find_socket(const std::string& path_arg) {
  if (const char* env = std::getenv("PTCFS_DIRECT_SOCKET"); env && *env) return std::string(env);
  PTC_ASSIGN_OR_RETURN(const std::string path, absolute(path_arg));
  // The mount's root: the last folder up from the path on the same device.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return io_error(path, errno);
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
    return unavailable("no direct socket serves " + path + " (not a ptcfs mount, or its daemon runs without one)");
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return unavailable("no direct socket serves " + path + " (" + file + " is empty)");
  return std::string(buf, static_cast<size_t>(n));
}

Result<std::unique_ptr<DirectFile>> DirectFile::open(const std::string& path_arg, const std::string& socket_arg) {
  PTC_ASSIGN_OR_RETURN(const std::string path, absolute(path_arg));
  std::string socket = socket_arg;
  if (socket.empty()) {
    PTC_ASSIGN_OR_RETURN(socket, find_socket(path));
  }
  std::unique_ptr<DirectFile> f(new DirectFile);
  PTC_ASSIGN_OR_RETURN(f->sock_, direct::connect_unix(socket));
  // A refused client (another uid, too many connections) may find the connection closed
  // before its request goes out: the daemon's answer, read next, says why.
  const Status sent = direct::send_message(f->sock_, json{{"op", "open"}, {"path", path}, {"map", 2}}.dump(), {}, {});
  auto reply = direct::recv_message(f->sock_);
  if (!reply) return (sent ? reply.status() : sent).with_context("opening " + path + " through " + socket);
  const std::vector<int> fds = reply->fds;
  const json j = json::parse(reply->json, nullptr, false);
  if (!j.is_object() || !j.contains("ok")) {
    close_all(fds);
    return invalid("opening " + path + ": the daemon's reply is malformed");
  }
  if (!j.value("ok", false)) {
    close_all(fds);
    return error(code_from_name(j.value("code", std::string("internal"))), j.value("error", std::string()));
  }
  f->size_ = j.value("size", uint64_t{0});
  f->version_ = j.value("version", uint64_t{0});
  // Version 2 (runs of rows) from a daemon that knows it, else version 1 (spans).
  Result<direct::RunMap> map = direct::RunMap{};
  if (j.value("map", uint64_t{1}) == 2) {
    map = direct::decode_runs(reply->binary, fds.size());
  } else if (auto spans = direct::decode_spans(reply->binary, fds.size()); spans) {
    for (const auto& s : *spans) map->add(s.src, s.off, s.len);
  } else {
    map = spans.status();
  }
  if (!map) {
    close_all(fds);
    return map.status().with_context("opening " + path);
  }
  // Every piece of every row must lie inside its file before anything is mapped: a file cut
  // short would give SIGBUS on first touch. (decode_runs checked the ends fit in 64 bits.)
  std::vector<uint64_t> sizes(fds.size());
  for (size_t i = 0; i < fds.size(); ++i) {
    struct stat st {};
    if (::fstat(fds[i], &st) != 0) {
      close_all(fds);
      return io_error("opening " + path + ": fstat of a descriptor from the daemon", errno);
    }
    sizes[i] = static_cast<uint64_t>(st.st_size);
  }
  for (const auto& r : map->runs())
    for (uint32_t k = r.first; k < r.first + r.count; ++k) {
      const direct::Piece& p = map->pieces()[k];
      if (p.src == direct::kZeros || p.len == 0) continue;
      const uint64_t end = p.off + (r.rows - 1) * p.stride + p.len;
      if (end > sizes[static_cast<size_t>(p.src)]) {
        close_all(fds);
        return corrupt("opening " + path + ": a file holding its bytes has " +
                       std::to_string(sizes[static_cast<size_t>(p.src)]) + " bytes, the map reads up to " +
                       std::to_string(end) + " (a blob cut short behind the daemon's back?)");
      }
    }
  if (map->size() != f->size_) {
    close_all(fds);
    return invalid("opening " + path + ": the map covers " + std::to_string(map->size()) + " of " +
                   std::to_string(f->size_) + " bytes");
  }
  f->maps_.assign(fds.size(), Mapping{nullptr, 0});
  for (size_t i = 0; i < fds.size(); ++i) {
    if (sizes[i] == 0) continue;
    void* m = ::mmap(nullptr, sizes[i], PROT_READ | PROT_WRITE, MAP_PRIVATE, fds[i], 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      close_all(fds);
      return io_error("opening " + path + ": mapping a file from the daemon", err);
    }
    f->maps_[i] = Mapping{static_cast<const std::byte*>(m), sizes[i]};
  }
  f->fds_ = fds;  // kept open for fd(): closed with the file
  uint64_t at = 0;
  f->pieces_.reserve(map->pieces().size());
  for (const auto& r : map->runs()) {
    Run run{at, r.rows, 0, static_cast<uint32_t>(f->pieces_.size()), 0};
    for (uint32_t k = r.first; k < r.first + r.count; ++k) {
      const direct::Piece& p = map->pieces()[k];
      if (p.len == 0) continue;
      const bool zeros = p.src == direct::kZeros;
      f->pieces_.push_back(Piece{zeros ? nullptr : f->maps_[static_cast<size_t>(p.src)].data + p.off, p.len,
                                 zeros ? 0 : p.stride, zeros ? 0u : static_cast<uint32_t>(p.src)});
      run.row_bytes += p.len;
      ++run.count;
    }
    if (run.row_bytes == 0) continue;
    f->runs_.push_back(run);
    f->starts_.push_back(at);
    at += run.rows * run.row_bytes;
  }
  return f;
}

DirectFile::~DirectFile() {
  for (const Mapping& m : maps_)
    if (m.data) ::munmap(const_cast<std::byte*>(m.data), m.len);
  close_all(fds_);
  if (sock_ >= 0) ::close(sock_);  // the daemon lets the version go
}

const std::vector<DirectFile::Span>& DirectFile::spans() const {
  std::call_once(spans_once_, [this] {
    auto add = [&](const std::byte* data, uint64_t len, uint32_t source) {
      if (!spans_.empty()) {
        Span& last = spans_.back();
        if (data ? last.data && last.source == source && last.data + last.len == data : !last.data) {
          last.len += len;
          return;
        }
      }
      spans_.push_back(Span{data, len, source});
    };
    for (const Run& r : runs_)
      for (uint64_t row = 0; row < r.rows; ++row)
        for (uint32_t j = r.first; j < r.first + r.count; ++j) {
          const Piece& p = pieces_[j];
          add(p.data ? p.data + row * p.stride : nullptr, p.len, p.source);
        }
  });
  return spans_;
}

size_t DirectFile::run_at(uint64_t off, size_t hint) const {
  const auto holds = [&](size_t i) { return off - runs_[i].start < runs_[i].rows * runs_[i].row_bytes; };
  if (hint < runs_.size() && runs_[hint].start <= off && holds(hint)) return hint;
  if (hint + 1 < runs_.size() && runs_[hint + 1].start <= off && holds(hint + 1)) return hint + 1;
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), off) - starts_.begin()) - 1;
}

const DirectFile::Piece* DirectFile::piece_of(uint64_t off, uint64_t len, size_t& hint, const std::byte** at) const {
  hint = run_at(off, hint);
  const Run& r = runs_[hint];
  const uint64_t in = off - r.start, row = in / r.row_bytes;
  uint64_t pos = in % r.row_bytes;
  for (uint32_t j = r.first; j < r.first + r.count; ++j) {
    const Piece& p = pieces_[j];
    if (pos >= p.len) {
      pos -= p.len;
      continue;
    }
    if (len > p.len - pos) return nullptr;  // runs on into the next piece
    *at = p.data ? p.data + row * p.stride + pos : nullptr;
    return &p;
  }
  return nullptr;  // unreachable: off lies in the run
}

std::byte* DirectFile::copy_row(const Run& r, uint64_t row, uint64_t pos, uint64_t n, std::byte* dst) const {
  for (uint32_t j = r.first; n > 0; ++j) {
    const Piece& p = pieces_[j];
    if (pos >= p.len) {
      pos -= p.len;
      continue;
    }
    const uint64_t m = std::min(n, p.len - pos);
    if (p.data)
      std::memcpy(dst, p.data + row * p.stride + pos, m);
    else
      std::memset(dst, 0, m);
    dst += m;
    n -= m;
    pos = 0;
  }
  return dst;
}

size_t DirectFile::copy(uint64_t off, uint64_t len, std::byte* dst, size_t i) const {
  for (i = run_at(off, i);; ++i) {
    const Run& r = runs_[i];
    const uint64_t in = off - r.start;
    const uint64_t take = std::min(len, r.rows * r.row_bytes - in);
    uint64_t row = in / r.row_bytes, pos = in % r.row_bytes, left = take;
    if (pos != 0 || left < r.row_bytes) {  // a partial first row
      const uint64_t n = std::min(left, r.row_bytes - pos);
      dst = copy_row(r, row++, pos, n, dst);
      left -= n;
    }
    // Whole rows: every piece of each, the map's own loop.
    const Piece* first = &pieces_[r.first];
    const Piece* end = first + r.count;
    for (; left >= r.row_bytes; ++row, left -= r.row_bytes)
      for (const Piece* p = first; p != end; ++p) {
        if (p->data)
          std::memcpy(dst, p->data + row * p->stride, p->len);
        else
          std::memset(dst, 0, p->len);
        dst += p->len;
      }
    if (left > 0) dst = copy_row(r, row, 0, left, dst);  // a partial last row
    off += take;
    len -= take;
    if (len == 0) return i;
  }
}

Status DirectFile::check_ranges(size_t n, const uint64_t* off, const uint64_t* len) const {
  for (size_t k = 0; k < n; ++k)
    if (off[k] > size_ || len[k] > size_ - off[k])
      return error(Code::kOutOfRange, (n > 1 ? "range " + std::to_string(k) + ": " : std::string()) + "read of [" +
                                          std::to_string(off[k]) + ", +" + std::to_string(len[k]) +
                                          ") past the end of a " + std::to_string(size_) + "-byte file");
  return Status::ok();
}

const std::byte* DirectFile::contiguous(uint64_t off, uint64_t len) const {
  if (off >= size_ || len > size_ - off) return nullptr;
  size_t hint = 0;
  const std::byte* at = nullptr;
  return piece_of(off, std::max<uint64_t>(len, 1), hint, &at) ? at : nullptr;
}

Status DirectFile::read(uint64_t off, uint64_t len, void* dst) const { return read_many(1, &off, &len, &dst); }

Status DirectFile::locate(size_t n, const uint64_t* off, const uint64_t* len, Location* out) const {
  PTC_RETURN_IF_ERROR(check_ranges(n, off, len));
  size_t hint = 0;
  for (size_t k = 0; k < n; ++k) {
    out[k] = Location{};
    const std::byte* at = nullptr;
    const Piece* p = len[k] > 0 ? piece_of(off[k], len[k], hint, &at) : nullptr;
    if (p && p->data)
      out[k] = Location{static_cast<int64_t>(p->source), static_cast<uint64_t>(at - maps_[p->source].data)};
  }
  return Status::ok();
}

Status DirectFile::read_many(size_t n, const uint64_t* off, const uint64_t* len, void* const* dst) const {
  PTC_RETURN_IF_ERROR(check_ranges(n, off, len));
  size_t hint = 0;
  for (size_t k = 0; k < n;) {
    // Ranges k..e-1: their destinations follow one another, `total` bytes from the first's start.
    auto* base = static_cast<std::byte*>(dst[k]);
    size_t e = k + 1;
    for (; e < n; ++e) {
      const auto prev_end = reinterpret_cast<uintptr_t>(dst[e - 1]) + len[e - 1];
      const auto next = reinterpret_cast<uintptr_t>(dst[e]);
      if (next < prev_end || next - prev_end >= kStreamGap) break;
    }
    const uint64_t total =
        static_cast<uint64_t>(reinterpret_cast<uintptr_t>(dst[e - 1]) + len[e - 1] - reinterpret_cast<uintptr_t>(base));
    if (total < 2 * kPopulateChunk) {
      for (; k < e; ++k)
        if (len[k] > 0) hint = copy(off[k], len[k], static_cast<std::byte*>(dst[k]), hint);
      continue;
    }
    uint64_t populated = 0;  // bytes from base on whose pages are populated
    for (; k < e; ++k) {
      auto* out = static_cast<std::byte*>(dst[k]);
      for (uint64_t done = 0; done < len[k];) {
        const uint64_t c = std::min(kPopulateChunk, len[k] - done);
        const auto end = static_cast<uint64_t>(out + done + c - base);
        if (end > populated) {
          const uint64_t upto = std::min(total, std::max(end, populated + kPopulateChunk));
          populate(base + populated, upto - populated);
          populated = upto;
        }
        hint = copy(off[k] + done, c, out + done, hint);
        done += c;
      }
    }
  }
  return Status::ok();
}

Result<const std::byte*> DirectFile::bytes() {
  if (runs_.size() == 1 && runs_[0].rows == 1 && runs_[0].count == 1 && pieces_[0].data) return pieces_[0].data;
  if (gathered_.size() != size_) {
    gathered_.resize(size_);
    PTC_RETURN_IF_ERROR(read(0, size_, gathered_.data()));
  }
  return gathered_.data();
}

}  // namespace ptcfs::client
