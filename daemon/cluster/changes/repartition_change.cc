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
Status same_datasets(const RepartitionChange& c, const std::vector<DatasetChange>& here) {
  if (!c.datasets) return Status::ok();  // a coordinator of an older build
  const std::map<std::string, uint64_t>& want = *c.datasets;
  const std::map<std::string, uint64_t> have = resplit_versions(here);
  if (have == want) return Status::ok();
  const auto text = [](const std::map<std::string, uint64_t>& m) {
    std::string out;
    for (const auto& [name, version] : m)
      out += (out.empty() ? "" : ", ") + name + " version " + std::to_string(version);
    return out.empty() ? std::string("none") : out;
  };
  return error(Code::kFailedPrecondition, "the datasets of job '" + c.job + "' to re-split differ: here " + text(have) +
                                              ", at the coordinator " + text(want) +
                                              " (a node catching up; try again in a moment)");
}

}  // namespace

Result<PreparedChange> prepare_part(const PartContext& ctx, const RepartitionChange& c, PrepareReply& reply) {
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
