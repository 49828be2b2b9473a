// A node's shards rebuilt over a step's durable copy, as pure data (docs/OPERATIONS.md "A node
// that lost its data directory"): a node that catches up on a step whose bytes it lost, with no
// other node holding them, holds its shards again as blobs evicted from the start, each one a
// whole rank file of the copy, fetched back on the first read as an evicted blob is.
//
// Whole rank files, because the copy's manifest states an XXH3-64 per file, not per slice: a
// fetched file is checked against it, and a damaged or changed object is never served. At the
// copy's own layout those are exactly this node's shards; at another layout (the step
// repartitioned since its copy was written) the files holding their TP-split tensors' bytes (a
// tensor replicated over TP is taken from one of those).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "daemon/durable/evicted_blob.h"
#include "daemon/store/step_version.h"
#include "ptc/base/status.h"
#include "ptc/formats/export_manifest.h"
#include "ptc/layout.h"

namespace ptcfs::durable {

struct CopyRestore {
  std::map<size_t, std::vector<StoredSlice>> stored;  // per shard of `to` asked for: its slices
  std::vector<EvictedBlob> blobs;                     // the blobs they use: one per rank file of the copy
};

// The slices of shards `shards` (indices in to.shards()) of a version at layout `to`, over a copy
// at layout `copy` (the same tensors) whose manifest is `m`, under `dir` (step_prefix). Each rank
// file of the copy they use becomes one blob, of the file's size and XXH3, drawn by `new_blob`
// (its size). kCorrupt naming the file when the manifest lacks one or states another size than
// the layout gives; the layouts' own errors when `to` cannot be planned from `copy`.
Result<CopyRestore> plan_copy_restore(const ptc::Layout& copy, const formats::ExportManifest& m, const std::string& dir,
                                      const ptc::Layout& to, const std::vector<size_t>& shards,
                                      const std::function<Result<uint64_t>(uint64_t size)>& new_blob);

}  // namespace ptcfs::durable
