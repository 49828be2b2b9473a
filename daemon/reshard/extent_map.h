// Building the extents of a new layout's slices from the extents of the old ones: the
// single-node half of executing a plan. Pure over its inputs (no I/O): every destination
// byte range of a copy is mapped through the source slice's extents; fills map to the zero
// blob; adjacent extents that continue each other are merged.
#pragma once

#include <functional>
#include <vector>

#include "daemon/store/step_version.h"
#include "ptc/plan.h"

namespace ptcfs {

// stored[s][j]: the extents of slice j of shard s of `to` (to.shards() order).
// `source(shard, slice)` gives the old stored slice of from.shards()[shard].
std::vector<std::vector<StoredSlice>> map_extents(
    const ptc::Layout& from, const ptc::Layout& to, const ptc::Plan& plan,
    const std::function<const StoredSlice&(uint32_t shard, uint32_t slice)>& source);

// Where a copy's bytes lie: `slice` holds the slab of the copy's source slice that starts
// at `lo` along the slab dimension (0: the whole source slice; a slab received from a peer
// starts at its transfer's src_lo).
struct CopySource {
  const StoredSlice* slice = nullptr;
  int64_t lo = 0;
};
// The general form: each copy names its own source.
std::vector<std::vector<StoredSlice>> map_extents(const ptc::Layout& from, const ptc::Layout& to, const ptc::Plan& plan,
                                                  const std::function<CopySource(const ptc::Copy&)>& source);

}  // namespace ptcfs
