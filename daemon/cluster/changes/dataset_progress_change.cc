#include "daemon/cluster/changes/dataset_progress_change.h"

#include "daemon/cluster/changes/part_context.h"
#include "daemon/cluster/membership.h"
#include "daemon/dataset/dataset_ops.h"
#include "ptc/base/json_util.h"
#include "ptc/dataset.h"

namespace ptcfs {

std::string DatasetProgressChange::record_key() const { return etcd_dataset_key(job, name); }

void DatasetProgressChange::write(nlohmann::json& j) const {
  j.update({{"job", job}, {"name", name}, {"from_version", from_version}, {"epoch", epoch}, {"consumed", consumed}});
  if (dp) j["dp"] = static_cast<uint64_t>(dp);
  if (global_batch) j["global_batch"] = global_batch;
  if (batch_offset) j["batch_offset"] = *batch_offset;
}

ptc::Result<DatasetProgressChange> DatasetProgressChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(ptc::check_members(j,
                                         {"op", "tx", "kind", "coordinator", "lease", "job", "name", "from_version",
                                          "epoch", "consumed", "dp", "global_batch", "batch_offset"},
                                         w));
  DatasetProgressChange c;
  PTC_ASSIGN_OR_RETURN(c.job, ptc::member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.name, ptc::member_string(j, "name", w));
  PTC_ASSIGN_OR_RETURN(c.from_version, ptc::member_u64(j, "from_version", w));
  PTC_ASSIGN_OR_RETURN(c.epoch, ptc::member_u64(j, "epoch", w));
  PTC_ASSIGN_OR_RETURN(c.consumed, ptc::member_u64(j, "consumed", w));
  if (j.contains("dp")) {
    PTC_ASSIGN_OR_RETURN(uint64_t dp, ptc::member_u64(j, "dp", w));
    if (dp == 0 || dp > static_cast<uint64_t>(ptc::kMaxDatasetDp))
      return ptc::invalid(w + ": dp " + std::to_string(dp) + " is out of range");
    c.dp = static_cast<int>(dp);
  }
  if (j.contains("global_batch")) {
    PTC_ASSIGN_OR_RETURN(c.global_batch, ptc::member_u64(j, "global_batch", w));
  }
  if (j.contains("batch_offset")) {
    PTC_ASSIGN_OR_RETURN(c.batch_offset, ptc::member_u64(j, "batch_offset", w));
  }
  return c;
}

ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const DatasetProgressChange& c, PrepareReply&) {
  PTC_ASSIGN_OR_RETURN(PreparedChange change,
                       prepare_dataset_progress(ctx.store, c.job, c.name, c.epoch, c.consumed, c.from_version, c.dp,
                                                c.global_batch, c.batch_offset));
  PTC_RETURN_IF_ERROR(change.claim_datasets(ctx.store));
  return change;
}

}  // namespace ptcfs
