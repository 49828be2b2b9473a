#include "daemon/cluster/changes/repartition_change.h"

#include "daemon/cluster/changes/part_context.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/repartition_part.h"
#include "daemon/dataset/dataset_ops.h"
#include "ptc/base/json_util.h"

namespace ptcfs {

namespace {

// A repartition re-splits on this node the datasets, at the versions, that the coordinator
// re-split: else the nodes would serve different splits after it (a node catching up on a
// progress it missed has another version).
ptc::Status same_datasets(const RepartitionChange& c, const std::vector<DatasetChange>& here) {
  if (!c.datasets) return ptc::Status::ok();  // a coordinator of an older build
  const std::map<std::string, uint64_t>& want = *c.datasets;
  const std::map<std::string, uint64_t> have = resplit_versions(here);
  if (have == want) return ptc::Status::ok();
  const auto text = [](const std::map<std::string, uint64_t>& m) {
    std::string out;
    for (const auto& [name, version] : m)
      out += (out.empty() ? "" : ", ") + name + " version " + std::to_string(version);
    return out.empty() ? std::string("none") : out;
  };
  return ptc::error(ptc::Code::kFailedPrecondition, "the datasets of job '" + c.job + "' to re-split differ: here " +
                                                        text(have) + ", at the coordinator " + text(want) +
                                                        " (a node catching up; try again in a moment)");
}

}  // namespace

std::string RepartitionChange::record_key() const { return etcd_step_key(job, step); }

void RepartitionChange::write(nlohmann::json& j) const {
  j.update({{"job", job},
            {"step", step},
            {"from_version", from_version},
            {"ptc", ptc_json(ptc)},
            {"from_nodes", from_nodes},
            {"to", to.to_string()},
            {"to_nodes", to_nodes},
            {"down", down},
            {"digest", digest}});
  if (!from_holders.empty()) j["from_holders"] = from_holders;
  if (!from_gpus.empty()) j["from_gpus"] = from_gpus;
  if (!to_gpus.empty()) j["to_gpus"] = to_gpus;
  if (global_batch) j["global_batch"] = global_batch;
  if (datasets) j["datasets"] = *datasets;
}

ptc::Result<RepartitionChange> RepartitionChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(ptc::check_members(
      j,
      {"op", "tx", "kind", "coordinator", "lease", "job", "step", "from_version", "ptc", "from_nodes", "from_holders",
       "from_gpus", "to", "to_nodes", "to_gpus", "down", "digest", "global_batch", "datasets"},
      w));
  RepartitionChange c;
  PTC_ASSIGN_OR_RETURN(c.job, ptc::member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.step, ptc::member_string(j, "step", w));
  PTC_ASSIGN_OR_RETURN(c.from_version, ptc::member_u64(j, "from_version", w));
  PTC_ASSIGN_OR_RETURN(c.ptc, ptc_member(j, "ptc", w));
  PTC_ASSIGN_OR_RETURN(c.from_nodes, ptc::member_strings(j, "from_nodes", w));
  PTC_ASSIGN_OR_RETURN(std::string to, ptc::member_string(j, "to", w));
  PTC_ASSIGN_OR_RETURN(c.to, ptc::parse_parallelism(to));
  PTC_ASSIGN_OR_RETURN(c.to_nodes, ptc::member_strings(j, "to_nodes", w));
  PTC_ASSIGN_OR_RETURN(c.from_gpus, ptc::member_gpus_or_empty(j, "from_gpus", w));
  PTC_ASSIGN_OR_RETURN(c.to_gpus, ptc::member_gpus_or_empty(j, "to_gpus", w));
  PTC_ASSIGN_OR_RETURN(c.down, ptc::member_strings(j, "down", w));
  PTC_ASSIGN_OR_RETURN(c.digest, ptc::member_u64_or(j, "digest", 0, w));
  PTC_ASSIGN_OR_RETURN(c.global_batch, ptc::member_u64_or(j, "global_batch", 0, w));
  if (j.contains("from_holders")) {
    PTC_ASSIGN_OR_RETURN(c.from_holders, ptc::member_string_lists(j, "from_holders", w));
  }
  if (j.contains("datasets")) {
    const nlohmann::json& d = j["datasets"];
    if (!d.is_object()) return ptc::invalid(w + ": 'datasets' must be an object of dataset name -> version");
    c.datasets.emplace();
    for (const auto& [name, version] : d.items()) {
      PTC_ASSIGN_OR_RETURN((*c.datasets)[name], ptc::member_u64(d, name.c_str(), w + ": datasets"));
    }
  }
  return c;
}

ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const RepartitionChange& c, PrepareReply& reply) {
  std::vector<std::string> ids = c.to_nodes;
  ids.insert(ids.end(), c.from_nodes.begin(), c.from_nodes.end());
  for (const auto& h : c.from_holders) ids.insert(ids.end(), h.begin(), h.end());
  ctx.members.learn(ids);
  // The job's datasets follow its dp, in the same commit, re-split from the versions the
  // coordinator re-split and claimed before the part is prepared (its pulls take a while):
  // no other change of them is prepared here until this one is decided.
  PTC_ASSIGN_OR_RETURN(auto datasets, resplit_datasets(ctx.store, c.job, c.to.dp, c.global_batch));
  PreparedChange held(ctx.store);
  held.datasets = std::move(datasets);
  PTC_RETURN_IF_ERROR(same_datasets(c, held.datasets));
  PTC_RETURN_IF_ERROR(held.claim_datasets(ctx.store));
  PTC_ASSIGN_OR_RETURN(PreparedChange change, prepare_repartition_part(ctx.store, ctx.peers, ctx.self, c, ctx.options));
  change.datasets = std::move(held.datasets);
  for (Claim& claim : held.claims) change.claims.push_back(std::move(claim));
  reply.bytes_received = change.bytes_received;
  return change;
}

}  // namespace ptcfs
