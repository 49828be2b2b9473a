// Live resharding plans (docs/ARCHITECTURE.md "Live resharding"): a running job moves from one
// parallel config to another without a checkpoint; every new rank receives the slices it lacks
// straight from the old ranks that hold them.
//
// It is the cluster plan (ptc/cluster_plan.h) with one node per global rank: ranks are placed
// as ptc/cluster.h places them on nodes of one GPU each (Megatron's rank order,
// rank = t + tp * (d + dp * p)), so an old shard's DP replicas are all its holders and
// sources are chosen as the cluster plan chooses them (least-loaded holder, ties to the lower
// rank). Node count: the larger of the two worlds; ranks past a config's world hold nothing
// of it. Since a rank holds one new shard, each transfer of the cluster plan is read by exactly
// the copies that name it, so the moves below that cross ranks add up to bytes_min.
//
// Pure and deterministic: every rank computes the same plan from the same inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptc/layout.h"

namespace ptcfs::ptc {

// Elements [lo, lo + len) along dimension `dim` of a local slice, every other dimension
// whole (dim -1: a scalar, the one element).
struct SlabRegion {
  int dim = 0;
  int64_t lo = 0, len = 0;
};

// Bytes of one tensor from a source rank's old slice into a destination rank's new slice.
// src_rank == dst_rank: a copy within the rank (no bytes cross).
struct LiveMove {
  uint32_t tensor = 0;  // index in the PTC's tensors
  int src_rank = 0, dst_rank = 0;
  SlabRegion src, dst;  // in the old slice's and the new slice's local coordinates
  uint64_t bytes = 0;
};

struct LiveRank {
  int old_shard = -1, new_shard = -1;  // from.shards() / to.shards() index; -1: outside that world
  uint64_t min = 0;                    // the least any plan can bring to this rank
  uint64_t sent = 0, received = 0;     // by this plan, between ranks
};

struct LivePlan {
  std::vector<LiveMove> moves;  // ordered by (dst_rank, tensor, dst position)
  std::vector<LiveRank> ranks;  // one per rank of the larger world
  uint64_t bytes_min = 0;       // min_transfer_bytes of the cluster plan; the sum of `sent`
};

// kInvalidArgument when either config does not fit the PTC (Layout::make).
Result<LivePlan> make_live_plan(const Ptc& ptc, const Parallelism& from, const Parallelism& to);

// The plan as JSON (docs/PYTHON.md "Live resharding"): regions as {"start", "shape"} boxes of
// the local slices, tensors by name, and per rank its shards, local shapes and byte counts.
std::string live_plan_json(const Ptc& ptc, const Parallelism& from, const Parallelism& to, const LivePlan& plan);

}  // namespace ptcfs::ptc
