// Repartition of a step on one node: plan (ptc/plan.h), map the new slices onto extents of
// the blobs already stored (no tensor byte is copied), compact slices too fragmented to
// read fast, then commit the new version in one atomic metadata write. The old version
// stays complete until the commit, and readable afterwards by files opened before it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/reshard/compactor.h"
#include "daemon/store/store.h"
#include "ptc/model.h"

namespace ptcfs {

struct RepartitionRequest {
  std::string job, step;
  ptc::Parallelism to;
  bool dry_run = false;
  std::vector<std::string> nodes;  // a cluster: node ids to place the new layout on (empty: every member)
  uint64_t global_batch = 0;       // the job's datasets' new global batch (0: each keeps its own)
};

struct RepartitionResult {
  std::string job, step;
  ptc::Parallelism from, to;
  bool dry_run = false;
  bool unchanged = false;  // the step already has this configuration
  uint64_t version = 0;    // the new version (the current one for a dry run or no change)
  size_t shards = 0, tensors = 0, copies = 0, fills = 0, extents = 0, compacted_slices = 0;
  uint64_t bytes_total = 0;      // bytes of the new shards
  uint64_t bytes_remapped = 0;   // served from old blobs without a copy
  uint64_t bytes_compacted = 0;  // copied into new blobs by compaction
  uint64_t bytes_fill = 0;       // padding (zeros; remapped + compacted + fill == total)
  uint64_t bytes_moved = 0;      // received from peers (0 on one node)
  uint64_t bytes_min = 0;        // the least any plan must receive from peers
  struct NodeBytes {
    std::string node;
    uint64_t received = 0, min = 0;
  };
  std::vector<NodeBytes> per_node;  // in a cluster: what each node received, and its minimum
  struct DatasetSplit {
    std::string name;
    int from_dp = 0, to_dp = 0;
    uint64_t from_global_batch = 0, to_global_batch = 0;
  };
  std::vector<DatasetSplit> datasets;  // the job's datasets re-split for the new dp or global batch
  double seconds = 0;                  // its JSON: to_json in daemon/control/results.h
};

// The current version of a step; kNotFound naming the job or the step that is missing.
Result<std::shared_ptr<const StepVersion>> current_version(const Store& store, const std::string& job,
                                                           const std::string& step);
// Fills the fields of `res` that the request and the old version fix, and builds the target
// layout (which validates the new config against the PTC).
Result<ptc::Layout> start_result(const RepartitionRequest& req, const StepVersion& old, RepartitionResult& res);

// Records the dataset re-splits of a repartition in its result.
void note_datasets(const std::vector<DatasetChange>& datasets, RepartitionResult& res);

using PhaseProgress = std::function<void(const std::string& phase, uint64_t done, uint64_t total)>;

Result<RepartitionResult> repartition(Store& store, const RepartitionRequest& req, const CompactionPolicy& policy = {},
                                      const PhaseProgress& progress = {});

}  // namespace ptcfs
