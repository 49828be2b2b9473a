#include "daemon/control/results.h"

namespace ptcfs {

using nlohmann::json;

json to_json(const ImportResult& r) {
  json out = {{"job", r.job},         {"step", r.step},   {"shards", r.shards},
              {"tensors", r.tensors}, {"bytes", r.bytes}, {"seconds", r.seconds}};
  if (r.format != "ptc") {
    out["format"] = r.format;
    out["template"] = r.template_name;
  }
  if (r.repartition) out["repartition"] = r.repartition->to_json();
  if (!r.nodes.empty()) {
    json nodes = json::array();
    for (const auto& n : r.nodes) nodes.push_back({{"node", n.node}, {"shards", n.shards}, {"bytes", n.bytes}});
    out["nodes"] = std::move(nodes);
  }
  return out;
}

json to_json(const DatasetAddResult& r) {
  json out = dataset_json(*r.version);
  out["bytes"] = r.summary.bytes;
  out["bytes_copied"] = r.summary.bytes_copied;
  out["seconds"] = r.summary.seconds;
  if (r.nodes) out["nodes"] = r.nodes;
  return out;
}

void add_status(const RunnerStatus& s, json& out) {
  out["bytes_sent"] = 0;
  out["bytes_received"] = 0;
  if (!s.cluster) return;
  json nodes = json::array();
  for (const auto& n : s.nodes) {
    json j = {{"id", n.id}, {"addr", n.addr}, {"gpus", n.gpus}, {"up", n.up}};
    if (n.up) {
      j["bytes_sent"] = n.bytes_sent;
      j["bytes_received"] = n.bytes_received;
      if (n.id == s.self) {
        out["bytes_sent"] = n.bytes_sent;
        out["bytes_received"] = n.bytes_received;
      }
    } else {
      j["error"] = n.error;
    }
    nodes.push_back(std::move(j));
  }
  out["node"] = s.self;
  out["cluster"] = {{"nodes", std::move(nodes)}, {"membership", s.membership}};
}

}  // namespace ptcfs
