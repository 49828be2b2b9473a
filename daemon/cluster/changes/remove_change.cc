#include "daemon/cluster/changes/remove_change.h"

#include "daemon/cluster/changes/part_context.h"
#include "daemon/cluster/membership.h"
#include "ptc/base/json_util.h"

namespace ptcfs {

Result<PreparedChange> prepare_part(const PartContext& ctx, const RemoveChange& c, PrepareReply&) {
  auto change = prepare_removal(ctx.store, c.job, c.step);
  if (!change && change.status().code() == Code::kNotFound) return PreparedChange{};  // never had it
  return change;
}

}  // namespace ptcfs
