#include "ptc/cluster.h"

#include <algorithm>
#include <set>

#include "ptc/base/json_util.h"

namespace ptcfs::ptc {

using nlohmann::json;

int ClusterConfig::total_gpus() const {
  int n = 0;
  for (const auto& node : nodes) n += node.gpus;
  return n;
}

int ClusterConfig::find(std::string_view id) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].id == id) return static_cast<int>(i);
  return -1;
}

Result<ClusterConfig> parse_cluster_json(std::string_view text, const std::string& file) {
  PTC_ASSIGN_OR_RETURN(json j, parse_json(text, file));
  PTC_RETURN_IF_ERROR(check_members(j, {"nodes", "secret_file"}, file));
  ClusterConfig c;
  if (!j.contains("nodes") || !j["nodes"].is_array() || j["nodes"].empty())
    return invalid(file + ": 'nodes' must be a non-empty list");
  std::set<std::string> ids, addrs;
  for (size_t i = 0; i < j["nodes"].size(); ++i) {
    const json& n = j["nodes"][i];
    const std::string where = file + ": nodes[" + std::to_string(i) + "]";
    PTC_RETURN_IF_ERROR(check_members(n, {"id", "addr", "gpus"}, where));
    NodeSpec node;
    if (!n.contains("id") || !n.contains("addr")) return invalid(where + ": 'id' and 'addr' are required");
    PTC_ASSIGN_OR_RETURN(node.id, get_string(n["id"], where + ": id"));
    PTC_RETURN_IF_ERROR(validate_id("node", node.id).with_context(where));
    PTC_ASSIGN_OR_RETURN(node.addr, get_string(n["addr"], where + ": addr"));
    const size_t colon = node.addr.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == node.addr.size())
      return invalid(where + ": addr '" + node.addr + "' is not HOST:PORT");
    if (n.contains("gpus")) {
      PTC_ASSIGN_OR_RETURN(int64_t g, get_int(n["gpus"], where + ": gpus", 1, 1 << 16));
      node.gpus = static_cast<int>(g);
    }
    if (!ids.insert(node.id).second) return invalid(where + ": node id '" + node.id + "' appears twice");
    if (!addrs.insert(node.addr).second) return invalid(where + ": addr '" + node.addr + "' appears twice");
    c.nodes.push_back(std::move(node));
  }
  if (j.contains("secret_file")) {
    PTC_ASSIGN_OR_RETURN(c.secret_file, get_string(j["secret_file"], file + ": secret_file"));
    if (c.secret_file.empty()) return invalid(file + ": secret_file is empty");
  }
  return c;
}

Result<std::vector<int>> place_ranks(const Parallelism& par, const ClusterConfig& cluster) {
  const int world = par.world();
  if (cluster.total_gpus() < world)
    return invalid("config " + par.to_string() + " needs " + std::to_string(world) + " GPUs but the cluster has " +
                   std::to_string(cluster.total_gpus()));
  std::vector<int> node_of(static_cast<size_t>(world));
  int rank = 0;
  for (size_t n = 0; n < cluster.nodes.size() && rank < world; ++n)
    for (int g = 0; g < cluster.nodes[n].gpus && rank < world; ++g)
      node_of[static_cast<size_t>(rank++)] = static_cast<int>(n);
  return node_of;
}

Result<std::vector<std::vector<int>>> shard_nodes(const Layout& layout, const ClusterConfig& cluster) {
  const Parallelism& par = layout.parallelism();
  PTC_ASSIGN_OR_RETURN(auto node_of, place_ranks(par, cluster));
  std::vector<std::set<int>> held(layout.shards().size());
  for (int p = 0; p < par.pp; ++p)
    for (int d = 0; d < par.dp; ++d)
      for (int t = 0; t < par.tp; ++t) {
        const int rank = t + par.tp * (d + par.dp * p);
        held[static_cast<size_t>(p) * par.tp + t].insert(node_of[static_cast<size_t>(rank)]);
      }
  std::vector<std::vector<int>> out;
  for (auto& s : held) out.emplace_back(s.begin(), s.end());
  return out;
}

Result<std::vector<std::vector<int>>> shard_nodes_on(const Layout& layout, const ClusterConfig& cluster,
                                                     const std::vector<std::string>& ids,
                                                     const std::vector<int>& gpus) {
  if (!gpus.empty() && gpus.size() != ids.size())
    return invalid("a placement of " + std::to_string(ids.size()) + " nodes with " + std::to_string(gpus.size()) +
                   " GPU counts");
  ClusterConfig sub;
  std::vector<int> global;
  for (size_t k = 0; k < ids.size(); ++k) {
    const std::string& id = ids[k];
    const int i = cluster.find(id);
    if (i < 0) return invalid("node '" + id + "' is not in the cluster");
    if (std::find(global.begin(), global.end(), i) != global.end()) return invalid("node '" + id + "' is named twice");
    global.push_back(i);
    sub.nodes.push_back(cluster.nodes[static_cast<size_t>(i)]);
    if (!gpus.empty()) {
      if (gpus[k] < 1) return invalid("node '" + id + "' is placed with " + std::to_string(gpus[k]) + " GPUs");
      sub.nodes.back().gpus = gpus[k];
    }
  }
  if (sub.nodes.empty()) return invalid("a job needs at least one node");
  PTC_ASSIGN_OR_RETURN(auto local, shard_nodes(layout, sub));
  for (auto& nodes : local) {
    for (int& n : nodes) n = global[static_cast<size_t>(n)];
    std::sort(nodes.begin(), nodes.end());
  }
  return local;
}

std::vector<int> gpus_of(const ClusterConfig& cluster, const std::vector<std::string>& ids) {
  std::vector<int> out;
  for (const auto& id : ids) {
    const int i = cluster.find(id);
    out.push_back(i < 0 ? 0 : cluster.nodes[static_cast<size_t>(i)].gpus);
  }
  return out;
}

}  // namespace ptcfs::ptc
