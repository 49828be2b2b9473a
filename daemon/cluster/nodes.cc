#include "daemon/cluster/nodes.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include <openssl/rand.h>

namespace ptcfs {

std::vector<int> all_nodes(const ptc::ClusterConfig& cluster) {
  std::vector<int> out;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) out.push_back(static_cast<int>(i));
  return out;
}

std::string node_id(const ptc::ClusterConfig& cluster, int node) { return cluster.nodes[static_cast<size_t>(node)].id; }

std::vector<std::vector<int>> node_indices(const ptc::ClusterConfig& cluster,
                                           const std::vector<std::vector<std::string>>& holders) {
  std::vector<std::vector<int>> out;
  for (const auto& ids : holders) {
    std::vector<int> nodes;
    for (const auto& id : ids)
      if (const int n = cluster.find(id); n >= 0) nodes.push_back(n);
    std::sort(nodes.begin(), nodes.end());
    out.push_back(std::move(nodes));
  }
  return out;
}

std::string new_transaction_id() {
  uint64_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1) {
    // OpenSSL's generator failed (it does not on Linux once seeded): fall back to the OS.
    std::random_device rd;
    v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace ptcfs
