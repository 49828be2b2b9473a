#include "daemon/direct/file_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <map>

namespace ptcfs {

using transport::direct::Span;

FileMap::~FileMap() {
  if (memfd >= 0) ::close(memfd);
}

ptc::Result<FileMap> map_of(const fs::ReadBuffer& rb) {
  FileMap m;
  std::map<int, int32_t> index;  // descriptor -> its index in m.fds
  auto src_of = [&](int fd) {
    auto [it, added] = index.emplace(fd, static_cast<int32_t>(m.fds.size()));
    if (added) m.fds.push_back(fd);
    return it->second;
  };
  auto add = [&](int32_t src, uint64_t off, uint64_t len) {
    if (!m.spans.empty()) {
      Span& last = m.spans.back();
      if (last.src == src && (src == transport::direct::kZeros || last.off + last.len == off)) {
        last.len += len;
        return;
      }
    }
    m.spans.push_back(Span{src, src == transport::direct::kZeros ? 0 : off, len});
  };
  // Bytes only in memory, in file order, into one memfd.
  uint64_t mem_bytes = 0;
  for (const auto& s : rb.segments())
    if (!s.zeros && s.fd < 0 && s.origin_fd < 0) mem_bytes += s.len;
  int32_t mem_src = -1;
  if (mem_bytes > 0) {
    m.memfd = ::memfd_create("ptcfs-direct", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m.memfd < 0) return ptc::io_error("memfd_create", errno);
    mem_src = src_of(m.memfd);
  }
  uint64_t mem_at = 0;
  for (const auto& s : rb.segments()) {
    if (s.zeros) {
      add(transport::direct::kZeros, 0, s.len);
    } else if (s.origin_fd >= 0) {
      add(src_of(s.origin_fd), s.origin_off, s.len);
    } else if (s.fd >= 0) {
      add(src_of(s.fd), s.off, s.len);
    } else {
      uint64_t done = 0;
      while (done < s.len) {
        const ssize_t n = ::pwrite(m.memfd, s.mem + done, s.len - done, static_cast<off_t>(mem_at + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ptc::io_error("writing a memfd of the direct path", errno);
        done += static_cast<uint64_t>(n);
      }
      add(mem_src, mem_at, s.len);
      mem_at += s.len;
    }
  }
  // Sealed: the client may map it without fearing it shrinks under the mapping.
  if (m.memfd >= 0 && ::fcntl(m.memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return ptc::io_error("sealing a memfd of the direct path", errno);
  return m;
}

}  // namespace ptcfs
