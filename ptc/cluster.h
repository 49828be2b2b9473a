// The cluster: its nodes (cluster.json) and the placement of ranks and shards on them.
//
// cluster.json: {"nodes": [{"id": "n0", "addr": "10.0.0.1:7070", "gpus": 8}, ...], "secret_file": "..."}
// Nodes take global ranks in order, `gpus` ranks each: node i holds ranks
// [sum of gpus before i, + gpus_i). Megatron's rank order: rank = t + tp * (d + dp * p).
// A node holds shard (t, p) when any of its ranks is TP rank t of stage p; DP replicas put
// the same shard on several nodes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ptc/layout.h"

namespace ptcfs::ptc {

struct NodeSpec {
  std::string id;
  std::string addr;  // HOST:PORT
  int gpus = 1;
};

struct ClusterConfig {
  std::vector<NodeSpec> nodes;
  std::string secret_file;  // as written (may be relative to the cluster.json's folder)
  int total_gpus() const;
  // Index of the node with this id, or -1.
  int find(std::string_view id) const;
};

// Parses and validates cluster.json: at least one node; unique non-empty ids (job-name
// rules) and addresses; gpus >= 1; no unknown keys. `file` names it in errors.
Result<ClusterConfig> parse_cluster_json(std::string_view text, const std::string& file);

// The node of each global rank of `par`; kInvalidArgument when the cluster has fewer GPUs
// than par.world() ranks (extra GPUs are left idle).
Result<std::vector<int>> place_ranks(const Parallelism& par, const ClusterConfig& cluster);

// For each shard of `layout` (layout.shards() order), the nodes holding it, ascending.
Result<std::vector<std::vector<int>>> shard_nodes(const Layout& layout, const ClusterConfig& cluster);

// The same with the ranks placed on the nodes `ids` only, in that order (a job on part of
// the cluster); node numbers are still indices into cluster.nodes. `gpus` (empty: each
// node's in `cluster`) gives the GPUs of each of `ids` as they were when the placement was
// made: a placement pinned in a step's record does not move when a node comes back with
// another GPU count. kInvalidArgument for an unknown or repeated id, a `gpus` of another
// length or below 1, or too few GPUs.
Result<std::vector<std::vector<int>>> shard_nodes_on(const Layout& layout, const ClusterConfig& cluster,
                                                     const std::vector<std::string>& ids,
                                                     const std::vector<int>& gpus = {});
// The GPUs of each of `ids` in `cluster` (0 for an id it lacks).
std::vector<int> gpus_of(const ClusterConfig& cluster, const std::vector<std::string>& ids);

}  // namespace ptcfs::ptc
