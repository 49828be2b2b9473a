// The change kind "dataset_progress": a dataset's position (epoch, samples consumed), and
// optionally its dp and global batch, moved on every node at once. Its struct, its members in
// peer.prepare, the record that decides it, and a node's prepare of its part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/store/prepared.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct PartContext;

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
  static ptc::Result<DatasetProgressChange> read(const nlohmann::json& j, const std::string& where);
};

// Claims the dataset as changing and checks it is still at `from_version`.
ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const DatasetProgressChange& c, PrepareReply& reply);

}  // namespace ptcfs
