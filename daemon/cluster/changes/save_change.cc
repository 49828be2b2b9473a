#include "daemon/cluster/changes/save_change.h"

#include <algorithm>
#include <set>

#include "daemon/cluster/changes/part_context.h"
#include "daemon/cluster/membership.h"
#include "daemon/store/checksum.h"
#include "ptc/base/json_util.h"

namespace ptcfs {

std::string SaveChange::record_key() const { return etcd_step_key(job, step); }

void SaveChange::write(nlohmann::json& j) const {
  j.update({{"job", job}, {"step", step}, {"ptc", ptc_json(ptc)}, {"holders", holders}});
}

ptc::Result<SaveChange> SaveChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(
      ptc::check_members(j, {"op", "tx", "kind", "coordinator", "lease", "job", "step", "ptc", "holders"}, w));
  SaveChange c;
  PTC_ASSIGN_OR_RETURN(c.job, ptc::member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.step, ptc::member_string(j, "step", w));
  PTC_ASSIGN_OR_RETURN(c.ptc, ptc_member(j, "ptc", w));
  PTC_ASSIGN_OR_RETURN(c.holders, ptc::member_string_lists(j, "holders", w));
  return c;
}

ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const SaveChange& c, PrepareReply& reply) {
  PTC_ASSIGN_OR_RETURN(ptc::Layout layout, ptc::Layout::make(c.ptc, c.ptc.parallelism));
  if (c.holders.size() != layout.shards().size())
    return ptc::invalid("peer.prepare: the holders do not match the layout of " + c.job + "/" + c.step);
  StepPlacement placement;
  placement.holders = c.holders;
  std::set<std::string> nodes;
  for (const auto& ids : c.holders) nodes.insert(ids.begin(), ids.end());
  placement.nodes.assign(nodes.begin(), nodes.end());
  for (const auto& ids : c.holders) placement.held.push_back(std::find(ids.begin(), ids.end(), ctx.id) != ids.end());
  const bool wrote = ctx.saves.progress(c.job, c.step).has_value();
  if (!wrote) {
    for (bool h : placement.held)
      if (h)
        return ptc::internal("node " + ctx.id + " is named a holder of " + c.job + "/" + c.step + " but has no part");
    PreparedChange change(ctx.store);
    PTC_RETURN_IF_ERROR(change.claim(ctx.store, Claim::kNewStep, c.job, c.step));
    const size_t n = layout.shards().size();
    change.next = ctx.store.new_version(c.job, c.step, 1, std::move(layout), std::vector<std::vector<StoredSlice>>(n),
                                        std::move(placement));
    return change;
  }
  PTC_ASSIGN_OR_RETURN(PreparedChange change, ctx.saves.prepare_part(c.job, c.step, placement));
  // What the coordinator compares between replicas: the slices' checksums, per shard held.
  const auto& v = *change.next;
  for (size_t s = 0; s < v.layout().shards().size(); ++s) {
    if (!v.placement().holds(s)) continue;
    Xxh3Stream d;
    const auto& shard = v.layout().shards()[s];
    for (size_t j = 0; j < v.layout().slices(shard).size(); ++j) {
      const uint64_t h = v.stored(shard, j).xxh3.value_or(0);
      d.update(&h, sizeof h);
    }
    reply.shard_digests[shard.name()] = d.digest();
  }
  return change;
}

}  // namespace ptcfs
