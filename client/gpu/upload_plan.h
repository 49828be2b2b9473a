// How a byte range of a direct file goes up into device memory (docs/ARCHITECTURE.md "Path of a
// GPU load"). Pure: no CUDA, no I/O; the executor (upload.h) carries a plan out.
//
// The math. The range [off, off + len) of a file is a sequence of pieces, each a run of bytes of
// one mapped source (a blob) or zeros, landing at consecutive destination offsets. A piece that
// a repartition left strided is one of many short runs of one source at rising addresses (the
// rows of a column split). Pieces of one source whose gaps are small are merged into a window:
// the window's whole host range goes up in one copy and the kernel gathers the pieces out of it
// on the device, so a strided tensor costs a few large copies instead of one per row. A gap is
// small when it is at most max(gap_floor, the next piece's length): a window then carries at
// most about twice the bytes it needs. Windows are cut into chunks of at most `chunk_bytes` (one
// staging slot); a chunk whose bytes all land in one run is copied straight to its destination,
// any other is staged in device scratch and gathered by segments.
//
// Invariants of a plan: every destination byte of [0, len) is written by exactly one segment or
// zero fill; a chunk's segments lie inside the chunk; chunks are in order of source address within
// a window and windows in order of their first destination byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "client/gpu/segment_copy.h"

namespace ptcfs::gpu {

// A run of the file's bytes: `len` bytes at `data` (nullptr: zeros) of mapped source `source`.
struct Piece {
  const std::byte* data = nullptr;
  uint64_t len = 0;
  uint32_t source = 0;
};

struct Chunk {
  const std::byte* src = nullptr;  // first host byte staged; nullptr: zero fill of segments[0]
  uint64_t len = 0;                // bytes staged from src (0 for a zero fill)
  std::vector<Segment> segments;
  uint32_t source = 0;  // the mapped source src lies in (Piece::source)
  bool direct() const { return src && segments.size() == 1 && segments[0].src == 0 && segments[0].len == len; }
};

struct UploadOptions {
  uint64_t chunk_bytes = 8ull << 20;  // one staging slot
  uint64_t gap_floor = 64ull << 10;
};

struct UploadPlan {
  std::vector<Chunk> chunks;
  uint64_t staged_bytes = 0;  // host bytes copied up (>= the useful bytes; gaps of windows included)
  uint64_t zero_bytes = 0;
  size_t direct_chunks = 0, gathered_chunks = 0;
};

// The pieces of [off, off + len) of a file whose bytes are `spans` in order (spans must cover at
// least off + len bytes; the caller checks the range).
std::vector<Piece> cut_range(const std::vector<Piece>& spans, uint64_t off, uint64_t len);

// The plan for pieces landing at destination offsets 0, len(p0), len(p0)+len(p1), ...
UploadPlan plan_upload(const std::vector<Piece>& pieces, const UploadOptions& options = {});

}  // namespace ptcfs::gpu
