#include "daemon/cluster/changes/dataset_progress_change.h"

#include "daemon/cluster/changes/part_context.h"
#include "daemon/cluster/membership.h"
#include "daemon/dataset/dataset_ops.h"
#include "ptc/base/json_util.h"
#include "ptc/dataset.h"

namespace ptcfs {

Result<PreparedChange> prepare_part(const PartContext& ctx, const DatasetProgressChange& c, PrepareReply&) {
  PTC_ASSIGN_OR_RETURN(PreparedChange change,
                       prepare_dataset_progress(ctx.store, c.job, c.name, c.epoch, c.consumed, c.from_version, c.dp,
                                                c.global_batch, c.batch_offset));
  PTC_RETURN_IF_ERROR(change.claim_datasets(ctx.store));
  return change;
}

}  // namespace ptcfs
