#include "daemon/control/results.h"

#include "fs/dataset_views.h"
#include "ptc/formats/mmidx.h"

namespace ptcfs {

using nlohmann::json;

namespace {
json par_json(const ptc::Parallelism& p) { return {{"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}}; }
}  // namespace

json to_json(const RepartitionResult& r) {
  json nodes = json::array();
  for (const auto& n : r.per_node)
    nodes.push_back({{"node", n.node}, {"bytes_received", n.received}, {"bytes_min", n.min}});
  json out = {{"job", r.job},
              {"step", r.step},
              {"from", par_json(r.from)},
              {"to", par_json(r.to)},
              {"dry_run", r.dry_run},
              {"unchanged", r.unchanged},
              {"version", r.version},
              {"shards", r.shards},
              {"tensors", r.tensors},
              {"copies", r.copies},
              {"fills", r.fills},
              {"extents", r.extents},
              {"compacted_slices", r.compacted_slices},
              {"bytes_total", r.bytes_total},
              {"bytes_remapped", r.bytes_remapped},
              {"bytes_compacted", r.bytes_compacted},
              {"bytes_fill", r.bytes_fill},
              {"bytes_moved", r.bytes_moved},
              {"bytes_min", r.bytes_min},
              {"seconds", r.seconds}};
  if (!r.per_node.empty()) out["nodes"] = std::move(nodes);
  json ds = json::array();
  for (const auto& d : r.datasets)
    ds.push_back({{"name", d.name},
                  {"from_dp", d.from_dp},
                  {"to_dp", d.to_dp},
                  {"from_global_batch", d.from_global_batch},
                  {"to_global_batch", d.to_global_batch}});
  out["datasets"] = std::move(ds);
  return out;
}

json step_json(const StepVersion& v) {
  const auto& layout = v.layout();
  json shards = json::array();
  for (const auto& s : layout.shards()) {
    uint64_t bytes = 0;
    for (const auto& sl : layout.slices(s)) bytes += layout.bytes(sl);
    shards.push_back({{"name", s.name()}, {"tensors", layout.slices(s).size()}, {"bytes", bytes}});
  }
  const auto& par = layout.parallelism();
  return {{"job", v.job()},
          {"step", v.step()},
          {"version", v.version()},
          {"parallelism", par_json(par)},
          {"tensors", layout.ptc().tensors.size()},
          {"bytes", v.total_bytes()},
          {"shards", std::move(shards)}};
}

json dataset_json(const DatasetVersion& v) {
  json j = fs::dataset_state(v);
  j["job"] = v.job();
  j["name"] = v.name();
  if (v.spec().format == ptc::DatasetFormat::kMegatron) j["dtype"] = formats::mmidx_dtype_name(v.dtype_code());
  j["files"] = v.source().files().size();
  if (!v.home().empty()) j["home"] = v.home();
  return j;
}

json to_json(const ImportResult& r) {
  json out = {{"job", r.job},         {"step", r.step},   {"shards", r.shards},
              {"tensors", r.tensors}, {"bytes", r.bytes}, {"seconds", r.seconds}};
  if (r.format != "ptc") out["format"] = r.format;
  if (r.format == "hf") out["template"] = r.template_name;
  if (r.repartition) out["repartition"] = to_json(*r.repartition);
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

json to_json(const durable::StepDurability& d) {
  json j{{"state", durable::state_name(d.state)},
         {"version", d.version},
         {"bytes_uploaded", d.bytes_done},
         {"bytes_total", d.bytes_total}};
  if (!d.note.empty()) j["note"] = d.note;
  if (d.failures) j["failures"] = d.failures;
  return j;
}

}  // namespace ptcfs
