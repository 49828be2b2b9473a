// The coordinator's calls with JSON results that daemon/control/ makes until the control
// service takes a ChangeRunner (issue 26 §1): each is the typed call (coordinator.h) and
// today's JSON of its result. This file goes when control/ prints results itself.
#include "daemon/cluster/coordinator.h"
#include "daemon/dataset/dataset_ops.h"

namespace ptcfs {

using nlohmann::json;

namespace {

PhaseProgress phases(const transport::ProgressSink& progress) {
  if (!progress) return {};
  return [progress](const std::string& phase, uint64_t done, uint64_t total) {
    progress(json{{"phase", phase}, {"done", done}, {"total", total}});
  };
}

}  // namespace

ptc::Result<json> Coordinator::import(const std::string& dir, const std::string& job, const std::string& step,
                                      const std::vector<std::string>& nodes, const transport::ProgressSink& progress) {
  PTC_ASSIGN_OR_RETURN(const ImportResult r, import(ImportRequest{dir, job, step, nodes, {}, {}}, phases(progress)));
  json per_node = json::array();
  for (const auto& n : r.nodes) per_node.push_back({{"node", n.node}, {"shards", n.shards}, {"bytes", n.bytes}});
  return json{{"job", r.job},     {"step", r.step},       {"shards", r.shards},      {"tensors", r.tensors},
              {"bytes", r.bytes}, {"seconds", r.seconds}, {"nodes", std::move(per_node)}};
}

ptc::Result<RepartitionResult> Coordinator::repartition(const RepartitionRequest& req,
                                                        const std::vector<std::string>& nodes,
                                                        const transport::ProgressSink& progress) {
  RepartitionRequest r = req;
  if (!nodes.empty()) r.nodes = nodes;
  return repartition(r, phases(progress));
}

ptc::Result<json> Coordinator::dataset_add(const DatasetAddRequest& req, int dp, const IndexProgress& progress) {
  DatasetAddRequest r = req;
  r.dp = dp;
  PhaseProgress phase;
  if (progress) phase = [progress](const std::string&, uint64_t done, uint64_t total) { progress(done, total); };
  PTC_ASSIGN_OR_RETURN(const DatasetAddResult added, dataset_add(r, phase));
  json summary = dataset_json(*added.version);
  summary["bytes"] = added.summary.bytes;
  summary["bytes_copied"] = added.summary.bytes_copied;
  summary["seconds"] = added.summary.seconds;
  summary["nodes"] = added.nodes;
  return summary;
}

ptc::Result<json> Coordinator::dataset_progress(const std::string& job, const std::string& name,
                                                std::optional<uint64_t> epoch, uint64_t consumed) {
  PTC_ASSIGN_OR_RETURN(auto v, dataset_progress(DatasetProgressRequest{job, name, epoch, consumed}));
  return dataset_json(*v);
}

json Coordinator::nodes_status() {
  json out = json::array();
  for (const auto& n : status().nodes) {
    json j = {{"id", n.id}, {"addr", n.addr}, {"gpus", n.gpus}, {"up", n.up}};
    if (n.up) {
      j["bytes_sent"] = n.bytes_sent;
      j["bytes_received"] = n.bytes_received;
    } else {
      j["error"] = n.error;
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace ptcfs
