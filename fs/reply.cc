#include "fs/reply.h"

#include <sys/uio.h>

#include <algorithm>
#include <new>
#include <vector>

namespace ptcfs::fs {

void reply_read(fuse_req_t req, const ReadBuffer& rb) {
  const auto& segs = rb.segments();
  if (segs.empty()) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  // Every piece in memory (mapped blobs): one writev from those pages, so the only copy is
  // the kernel's into its page cache. libfuse's splice path would need a pipe larger than
  // 1 MiB for a 1 MiB reply, which an unprivileged or containerised root cannot get, and
  // its fallback reads every file range into a buffer first (docs/BENCHMARKS.md).
  if (segs.size() < kMaxReplyIov &&
      std::all_of(segs.begin(), segs.end(), [](const ReadBuffer::Segment& s) { return s.fd < 0; })) {
    std::vector<iovec> iov(segs.size());
    for (size_t i = 0; i < segs.size(); ++i) iov[i] = {const_cast<std::byte*>(segs[i].mem), segs[i].len};
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
    return;
  }
  // fuse_bufvec holds one fuse_buf inline; allocate room for the rest.
  std::vector<char> storage(sizeof(fuse_bufvec) + (segs.size() - 1) * sizeof(fuse_buf));
  auto* bv = new (storage.data()) fuse_bufvec;
  *bv = FUSE_BUFVEC_INIT(0);
  bv->count = segs.size();
  for (size_t i = 0; i < segs.size(); ++i) {
    fuse_buf& b = bv->buf[i];
    b = fuse_buf{};
    b.size = segs[i].len;
    if (segs[i].fd >= 0) {
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      b.fd = segs[i].fd;
      b.pos = static_cast<off_t>(segs[i].off);
    } else {
      b.mem = const_cast<std::byte*>(segs[i].mem);
    }
  }
  fuse_reply_data(req, bv, FUSE_BUF_SPLICE_MOVE);
}

}  // namespace ptcfs::fs
