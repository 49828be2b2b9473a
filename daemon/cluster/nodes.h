// Small helpers over a cluster's node list shared by the peer service and the coordinator.
#pragma once

#include <string>
#include <vector>

#include "ptc/cluster.h"

namespace ptcfs {

// Every node's index, in the table's order (cluster.json's, in static mode).
std::vector<int> all_nodes(const ptc::ClusterConfig& cluster);
// The id of node `node` (an index into cluster.nodes).
std::string node_id(const ptc::ClusterConfig& cluster, int node);
// Per shard, the indices of the nodes named in `holders` (ids not in the cluster are left out),
// sorted: the explicit holders of a saved step, as the peer reader and the planner take them.
std::vector<std::vector<int>> node_indices(const ptc::ClusterConfig& cluster,
                                           const std::vector<std::vector<std::string>>& holders);
// A fresh random transaction id (16 hex digits).
std::string new_transaction_id();

}  // namespace ptcfs
