// Cluster plans: a repartition across nodes, where every node builds the new shards placed
// on it, from what it already holds and from slabs its peers send.
//
// For node n and tensor X, let need(n, X) be the union of the global intervals (along X's
// slab dimension) of the pieces of X in the new shards n must hold, and have(n, X) the union
// of those in the old shards n holds. The elements need - have are what n must receive; the
// least any plan can move is
//
//     bytes_min = sum over n, X of |need(n, X) - have(n, X)| * unit(X)
//
// (unit: the bytes of one index along the slab dimension; padding is never moved). The plan
// meets it exactly: need - have is cut into transfers, each a slab of one source piece held
// by a live node other than n, sent once; every copy into any of n's new shards then reads
// either a source on n (preferring the same shard id, as on one node) or a received slab.
// Sources are chosen, per transfer, on the least-loaded node holding them (bytes assigned
// so far; ties to the lower node id, then shard index), so replicas share the sending.
//
// Pure and deterministic: every node computes the same plan from the same inputs. Copies
// and fills are ordered by (dst_node, dst shard, slice, position); transfers by (dst_node,
// tensor, glo).
#pragma once

#include <vector>

#include "ptc/plan.h"

namespace ptcfs::ptc {

struct ClusterHoldings {
  std::vector<std::vector<int>> src_nodes;  // per old shard: the live nodes holding it (may be empty)
  std::vector<std::vector<int>> dst_nodes;  // per new shard: the nodes that must hold it (may be empty)
  int num_nodes = 1;
};

// kInvalidArgument for mismatched layouts or node ids outside [0, num_nodes);
// kUnavailable, naming the tensor, when some needed element is held by no live node.
Result<Plan> make_cluster_plan(const Layout& from, const Layout& to, const ClusterHoldings& holdings);

// bytes_min above, computed on its own (not from a plan). Per node when `per_node` is given.
uint64_t min_transfer_bytes(const Layout& from, const Layout& to, const ClusterHoldings& holdings,
                            std::vector<uint64_t>* per_node = nullptr);

// The copies, fills and transfers of `plan` that node `node` carries out (dst_node == node),
// with Copy::transfer renumbered into the returned plan's transfers. Of the byte counts,
// only bytes_remote (the part's transfers) is set.
Plan node_part(const Plan& plan, int node);

}  // namespace ptcfs::ptc
