#include "daemon/cluster/changes/part_context.h"

namespace ptcfs {

Result<PreparedChange> prepare_part(const PartContext& ctx, const AnyChange& c, PrepareReply& reply) {
  return std::visit([&](const auto& k) { return prepare_part(ctx, k, reply); }, c);
}

}  // namespace ptcfs
