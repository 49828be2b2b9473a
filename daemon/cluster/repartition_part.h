// One node's part of a repartition across the cluster: the first phase of the two-phase
// change. The node computes the same cluster plan as every other node (ptc/cluster_plan.h,
// checked by digest), pulls its transfers from the peers that send them (in parallel,
// chunk by chunk, each chunk's XXH3 verified) into one new blob, maps its new shards onto
// extents of its old blobs and of the received slabs (nothing local is copied, as on one
// node), compacts what is too fragmented, and returns the change, not yet visible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/cluster/changes/repartition_change.h"
#include "daemon/reshard/compactor.h"
#include "daemon/reshard/source_dir.h"
#include "transport/backend.h"
#include "daemon/store/prepared.h"
#include "ptc/cluster_plan.h"

namespace ptcfs {

// The nodes a repartition plans over: every node of its old and new placements, sorted by id, with their GPUs from
// `known`. Every node builds the same table, whatever order it learnt of the nodes in, so
// every node computes the same plan (node numbers in the plan index this table). kNotFound
// names an id `known` lacks.
Result<ptc::ClusterConfig> change_table(const RepartitionChange& c, const ptc::ClusterConfig& known);
// The holdings of a change: old shards on the old placement's live nodes, new shards on
// the new placement; node numbers index `cluster` (the change's table; a down node it lacks
// is no source anyway).
Result<ptc::ClusterHoldings> cluster_holdings(const ptc::Layout& from, const ptc::Layout& to,
                                              const RepartitionChange& c, const ptc::ClusterConfig& cluster);
// A digest of a plan (copies, fills, transfers): nodes check they computed the same one.
uint64_t plan_digest(const ptc::Plan& plan);

struct PrepareOptions {
  CompactionPolicy policy;
  uint64_t chunk = 16 << 20;            // bytes per peer read
  unsigned fetchers = 4;                // parallel peer reads (docs/BENCHMARKS.md "cluster": 4 against 8 and 2)
  const SourceDirs* sources = nullptr;  // where imports read from (null: local folders only)
};

// Prepares this node's part (`self`: this node's index in the peer backend). `c.digest` (0: not checked) must equal the
// plan's. The step is marked as changing until the change is committed or aborted.
Result<PreparedChange> prepare_repartition_part(Store& store, transport::PeerBackend& peers, int self,
                                                const RepartitionChange& c, const PrepareOptions& opt);

}  // namespace ptcfs
