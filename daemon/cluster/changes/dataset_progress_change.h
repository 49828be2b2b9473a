// The change kind "dataset_progress": a dataset's position (epoch, samples consumed), and
// optionally its dp and global batch, moved on every node at once. Its struct, its members in
// peer.prepare, the record that decides it, and a node's prepare of its part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/membership.h"
#include "ptc/base/json_util.h"
#include "ptc/base/status.h"
#include "ptc/dataset.h"

namespace ptcfs {

struct PartContext;
struct PreparedChange;

struct DatasetProgressChange {
  static constexpr const char* kKind = "dataset_progress";
  std::string job, name;
  uint64_t from_version = 0, epoch = 0, consumed = 0;
  int dp = 0;                              // re-split for it (0: keep)
  uint64_t global_batch = 0;               // and this batch (0: keep)
  std::optional<uint64_t> batch_offset{};  // set exactly (DatasetProgressRequest)

  std::string record_key() const;
  std::string datasets_of() const { return job; }
  void write(nlohmann::json& j) const;
  static Result<DatasetProgressChange> read(const nlohmann::json& j, const std::string& where);
};

// Its members in peer.prepare, written and read here (header-only, so that the request's codec
// links without the store: tests/fuzz/fuzz_peer_reply.cc).
inline std::string DatasetProgressChange::record_key() const { return etcd_dataset_key(job, name); }

inline void DatasetProgressChange::write(nlohmann::json& j) const {
  j.update({{"job", job}, {"name", name}, {"from_version", from_version}, {"epoch", epoch}, {"consumed", consumed}});
  if (dp) j["dp"] = static_cast<uint64_t>(dp);
  if (global_batch) j["global_batch"] = global_batch;
  if (batch_offset) j["batch_offset"] = *batch_offset;
}

inline Result<DatasetProgressChange> DatasetProgressChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(check_members(j,
                                    {"op", "tx", "kind", "coordinator", "lease", "job", "name", "from_version", "epoch",
                                     "consumed", "dp", "global_batch", "batch_offset"},
                                    w));
  DatasetProgressChange c;
  PTC_ASSIGN_OR_RETURN(c.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.name, member_string(j, "name", w));
  PTC_ASSIGN_OR_RETURN(c.from_version, member_u64(j, "from_version", w));
  PTC_ASSIGN_OR_RETURN(c.epoch, member_u64(j, "epoch", w));
  PTC_ASSIGN_OR_RETURN(c.consumed, member_u64(j, "consumed", w));
  if (j.contains("dp")) {
    PTC_ASSIGN_OR_RETURN(uint64_t dp, member_u64(j, "dp", w));
    if (dp == 0 || dp > static_cast<uint64_t>(ptc::kMaxDatasetDp))
      return invalid(w + ": dp " + std::to_string(dp) + " is out of range");
    c.dp = static_cast<int>(dp);
  }
  if (j.contains("global_batch")) {
    PTC_ASSIGN_OR_RETURN(c.global_batch, member_u64(j, "global_batch", w));
  }
  if (j.contains("batch_offset")) {
    PTC_ASSIGN_OR_RETURN(c.batch_offset, member_u64(j, "batch_offset", w));
  }
  return c;
}

// Claims the dataset as changing and checks it is still at `from_version`.
Result<PreparedChange> prepare_part(const PartContext& ctx, const DatasetProgressChange& c, PrepareReply& reply);

}  // namespace ptcfs
