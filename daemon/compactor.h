// Compaction: copies the bytes of fragmented slices into one new blob per shard, so that
// reading them is a few large reads instead of many small ones. The copy runs on every
// core: work is cut into chunks of at most 16 MiB of destination bytes, and source blobs
// are memory-mapped.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "daemon/blob_store.h"
#include "daemon/step_version.h"

namespace ptcfs {

struct CompactionPolicy {
  // A slice is compacted when it has more than one extent and its average extent is
  // shorter than this (bench/ measures the read cost of small extents).
  uint64_t min_avg_extent = 256 << 10;
  unsigned threads = 0;  // 0: every core
};

bool should_compact(const StoredSlice& s, const CompactionPolicy& p);

struct CompactionResult {
  std::vector<BlobWriter> blobs;  // finished (synced) blobs, pending until committed
  uint64_t bytes = 0;
  size_t slices = 0;
};

// Rewrites in place the extents of every slice that should_compact() selects in `stored`
// (indexed by shard, then slice) to point at new blobs. `progress(done, total)` reports
// bytes copied.
ptc::Result<CompactionResult> compact(BlobStore& blobs, std::vector<std::vector<StoredSlice>>& stored,
                                      const CompactionPolicy& policy,
                                      const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace ptcfs
