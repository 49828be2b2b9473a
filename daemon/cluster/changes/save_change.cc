#include "daemon/cluster/changes/save_change.h"

#include <algorithm>
#include <set>

#include "daemon/cluster/changes/part_context.h"
#include "daemon/cluster/membership.h"
#include "daemon/store/checksum.h"
#include "ptc/base/json_util.h"

namespace ptcfs {

Result<PreparedChange> prepare_part(const PartContext& ctx, const SaveChange& c, PrepareReply& reply) {
  PTC_ASSIGN_OR_RETURN(ptc::Layout layout, ptc::Layout::make(c.ptc, c.ptc.parallelism));
  if (c.holders.size() != layout.shards().size())
    return invalid("peer.prepare: the holders do not match the layout of " + c.job + "/" + c.step);
  StepPlacement placement;
  placement.holders = c.holders;
  std::set<std::string> nodes;
  for (const auto& ids : c.holders) nodes.insert(ids.begin(), ids.end());
  placement.nodes.assign(nodes.begin(), nodes.end());
  for (const auto& ids : c.holders) placement.held.push_back(std::find(ids.begin(), ids.end(), ctx.id) != ids.end());
  const bool wrote = ctx.saves.progress(c.job, c.step).has_value();
  if (!wrote) {
    for (bool h : placement.held)
      if (h) return internal("node " + ctx.id + " is named a holder of " + c.job + "/" + c.step + " but has no part");
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
