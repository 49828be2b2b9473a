#include "daemon/cluster/changes/remove_change.h"

#include "daemon/cluster/changes/part_context.h"
#include "daemon/cluster/membership.h"
#include "ptc/base/json_util.h"

namespace ptcfs {

std::string RemoveChange::record_key() const { return etcd_step_key(job, step); }

void RemoveChange::write(nlohmann::json& j) const { j.update({{"job", job}, {"step", step}}); }

ptc::Result<RemoveChange> RemoveChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(ptc::check_members(j, {"op", "tx", "kind", "coordinator", "lease", "job", "step"}, w));
  RemoveChange c;
  PTC_ASSIGN_OR_RETURN(c.job, ptc::member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.step, ptc::member_string(j, "step", w));
  return c;
}

ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const RemoveChange& c, PrepareReply&) {
  auto change = prepare_removal(ctx.store, c.job, c.step);
  if (!change && change.status().code() == ptc::Code::kNotFound) return PreparedChange{};  // never had it
  return change;
}

}  // namespace ptcfs
