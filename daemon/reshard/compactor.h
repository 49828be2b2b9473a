// Compaction: copies the bytes of selected slices into one new blob per shard. A slice is
// selected when it is too fragmented to read fast (pieces of a few hundred bytes), or when
// it refers to a blob that is
// mostly dead (less than half its bytes used by the new version), so that once the old
// version is gone every blob is at least half live: stored bytes stay under twice the
// bytes of the current versions. The copy runs on every core: work is cut into chunks of
// at most 16 MiB of destination bytes, and source blobs are memory-mapped.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "daemon/store/blob_store.h"
#include "daemon/store/step_version.h"

namespace ptcfs {

struct CompactionPolicy {
  // A flat slice (one row) is compacted when it has more than one extent and its average
  // extent is shorter than this.
  uint64_t min_avg_extent = 256 << 10;
  // A strided slice (many rows) is compacted when its pieces (bytes per extent per row)
  // are shorter than this. Reads gather small pieces from mapped blobs: 1 KiB pieces read
  // as fast as compacted slices (docs/BENCHMARKS.md), so only tiny ones are worth a copy.
  uint64_t min_piece = 512;
  // A slice referring to a blob whose used fraction is below this is compacted.
  double min_blob_live = 0.5;
  unsigned threads = 0;  // 0: every core
};

// Which slices to compact, indexed like `stored`; pure over its inputs. `blob_size(id)`
// gives a blob file's size; its error (a blob that cannot be stat'ed: kIo) is the only one.
using Selection = std::vector<std::vector<bool>>;
Result<Selection> select_compaction(const std::vector<std::vector<StoredSlice>>& stored, const CompactionPolicy& policy,
                                    const std::function<Result<uint64_t>(uint64_t)>& blob_size);

struct CompactionStats {
  size_t slices = 0;              // slices compacted
  size_t extents = 0;             // extents of all slices after compaction
  uint64_t bytes_from_blobs = 0;  // bytes copied out of blobs (not zeros), each once
};
// What compact() will do with a selection; pure.
CompactionStats compaction_stats(const std::vector<std::vector<StoredSlice>>& stored, const Selection& selection);

struct CompactionResult {
  std::vector<BlobWriter> blobs;  // finished (synced) blobs, pending until committed
  uint64_t bytes = 0;
  size_t slices = 0;
};

// Rewrites in place the extents of every selected slice of `stored` (indexed by shard,
// then slice) to point at new blobs. Selected slices with identical extents share one copy. `progress(done, total)`
// reports bytes copied. Errors: the blob store's (kIo naming the blob, kResourceExhausted for a
// full disk), kCorrupt for a source blob shorter than its extents; `stored` is then unchanged
// and the new blobs are removed.
Result<CompactionResult> compact(BlobStore& blobs, std::vector<std::vector<StoredSlice>>& stored,
                                 const Selection& selection, const CompactionPolicy& policy,
                                 const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace ptcfs
