// ReadBuffer: the bytes of one read reply, as segments of memory and file ranges, built by
// whoever reads (a step's slices, a dataset's records, a view's header) and sent by
// fs/reply.h or the direct server without a copy where it can.
//
// Thread-safety: a value; one thread builds and sends it. Memory added stays valid while the
// buffer lives (the caller keeps its owner with keep()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::fs {

// A block of kZeroBlock zero bytes, static: the memory of zero segments (padding), here and
// in the daemon (peer reads, padding written into saved blobs).
inline constexpr uint64_t kZeroBlock = 1 << 20;
const std::byte* zero_block();

// The bytes of one read reply, as a list of segments: memory, or a range of a file
// descriptor (libfuse splices it where it can, else reads it). Segments are in reply order.
class ReadBuffer {
 public:
  struct Segment {
    const std::byte* mem = nullptr;  // when fd < 0
    int fd = -1;
    uint64_t off = 0;  // in fd
    uint64_t len = 0;
    // Memory that is a mapping of a file: its descriptor and offset (the direct path hands
    // the file to its client instead of the bytes); -1 otherwise.
    int origin_fd = -1;
    uint64_t origin_off = 0;
    bool zeros = false;  // all zero bytes (padding)
    // >= 0: the segment is rows()[rows] (`len` bytes in all), in a buffer that takes rows only.
    int32_t rows = -1;
  };

  // Rows of a strided slice, for a buffer that takes them (take_rows(): the direct server's, which
  // hands the client the layout rather than a segment per piece of every row). Row r is the
  // pieces in order; piece j of row r is pieces[j].len bytes at pieces[j].mem + r * stride,
  // which maps bytes at pieces[j].off + r * stride of file pieces[j].fd; zeros where fd < 0.
  struct RowPiece {
    const std::byte* mem = nullptr;
    int fd = -1;
    uint64_t off = 0, len = 0, stride = 0;
  };
  struct Rows {
    uint64_t rows = 0;
    std::vector<RowPiece> pieces;
  };

  // Memory that outlives the reply (owned by a view or static).
  void add_mem(const void* p, uint64_t len);
  // Zeros (padding).
  void add_zeros(uint64_t len);
  void add_fd(int fd, uint64_t off, uint64_t len);
  // Memory `p` that maps bytes [off, off + len) of file `fd` (a mapped blob).
  void add_mapped(const void* p, uint64_t len, int fd, uint64_t off);
  // The buffer takes rows (add_rows()); one that does not gets none (the FUSE replies, which
  // hand the kernel memory and file ranges): whoever fills it adds their pieces instead.
  void take_rows() { takes_rows_ = true; }
  bool takes_rows() const { return takes_rows_; }
  // `rows` rows of `pieces` (see RowPiece) as one segment of rows (none for no bytes), in a
  // buffer that takes rows only. They are kept as given: the direct map shapes them
  // (daemon/direct/file_map.cc hands them to transport/direct_protocol.h RunMap::add_rows,
  // which leaves empty pieces out and makes rows that lie back to back one span).
  void add_rows(uint64_t rows, const std::vector<RowPiece>& pieces);
  const std::vector<Rows>& rows() const { return rows_; }
  // Keeps an owner (an open blob) alive until the buffer is destroyed.
  void keep(std::shared_ptr<const void> owner) { keep_.push_back(std::move(owner)); }

  const std::vector<Segment>& segments() const { return segs_; }
  uint64_t size() const { return size_; }
  // Reads every segment into dst (size() bytes). kIo naming the error of a file range's
  // read, kCorrupt when a file is shorter than its range.
  Status copy_to(std::byte* dst) const;
  // Many small segments (more than `max_segments`, of fewer than `min_avg` bytes on average)
  // become one buffer this object owns: one copy and one write beat handing the kernel (or a
  // socket) each piece. Errors as copy_to; the buffer is unchanged then.
  Status gather_if_fragmented(size_t max_segments, uint64_t min_avg);

 private:
  std::vector<Segment> segs_;
  std::vector<Rows> rows_;
  std::vector<std::shared_ptr<const void>> keep_;
  uint64_t size_ = 0;
  bool takes_rows_ = false;
};

}  // namespace ptcfs::fs
