#include "daemon/direct/file_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <map>

namespace ptcfs {

using transport::direct::kZeros;

FileMap::~FileMap() {
  if (memfd >= 0) ::close(memfd);
}

Result<FileMap> map_of(const fs::ReadBuffer& rb) {
  FileMap m;
  std::map<int, int32_t> index;  // descriptor -> its index in m.fds
  auto src_of = [&](int fd) {
    auto [it, added] = index.emplace(fd, static_cast<int32_t>(m.fds.size()));
    if (added) m.fds.push_back(fd);
    return it->second;
  };
  // Bytes only in memory, in file order, into one memfd.
  uint64_t mem_bytes = 0;
  for (const auto& s : rb.segments())
    if (!s.zeros && s.fd < 0 && s.origin_fd < 0 && s.rows < 0) mem_bytes += s.len;
  int32_t mem_src = -1;
  if (mem_bytes > 0) {
    m.memfd = ::memfd_create("ptcfs-direct", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m.memfd < 0) return io_error("memfd_create", errno);
    mem_src = src_of(m.memfd);
  }
  uint64_t mem_at = 0;
  std::vector<transport::direct::Piece> pieces;
  for (const auto& s : rb.segments()) {
    if (s.rows >= 0) {
      const fs::ReadBuffer::Rows& r = rb.rows()[static_cast<size_t>(s.rows)];
      pieces.clear();
      for (const auto& p : r.pieces)
        pieces.push_back(p.fd < 0 ? transport::direct::Piece{kZeros, 0, p.len, 0}
                                  : transport::direct::Piece{src_of(p.fd), p.off, p.len, p.stride});
      m.runs.add_rows(r.rows, pieces);
    } else if (s.zeros) {
      m.runs.add(kZeros, 0, s.len);
    } else if (s.origin_fd >= 0) {
      m.runs.add(src_of(s.origin_fd), s.origin_off, s.len);
    } else if (s.fd >= 0) {
      m.runs.add(src_of(s.fd), s.off, s.len);
    } else {
      uint64_t done = 0;
      while (done < s.len) {
        const ssize_t n = ::pwrite(m.memfd, s.mem + done, s.len - done, static_cast<off_t>(mem_at + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io_error("writing a memfd of the direct path", errno);
        done += static_cast<uint64_t>(n);
      }
      m.runs.add(mem_src, mem_at, s.len);
      mem_at += s.len;
    }
  }
  // Sealed: the client may map it without fearing it shrinks under the mapping.
  if (m.memfd >= 0 && ::fcntl(m.memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return io_error("sealing a memfd of the direct path", errno);
  return m;
}

}  // namespace ptcfs
