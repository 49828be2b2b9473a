// The change kind "repartition": every node computes the same plan from this and builds its
// new shards from local slices and slabs pulled from its peers (daemon/cluster/repartition_part.h);
// the job's datasets follow its dp in the same commit. Its struct, its members in peer.prepare,
// the record that decides it, and a node's prepare of its part.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/store/prepared.h"
#include "ptc/base/status.h"
#include "ptc/model.h"

namespace ptcfs {

struct PartContext;

struct RepartitionChange {
  static constexpr const char* kKind = "repartition";
  std::string job, step;
  uint64_t from_version = 0;
  ptc::Ptc ptc;                                        // the step's PTC (its parallelism is the old config)
  std::vector<std::string> from_nodes;                 // the old placement (node ids in rank order)
  std::vector<int> from_gpus;                          // their GPUs when it was made (empty: as the cluster says now)
  std::vector<std::vector<std::string>> from_holders;  // per old shard, its nodes, when not by rank (a saved step)
  ptc::Parallelism to;
  std::vector<std::string> to_nodes;  // the new placement
  std::vector<int> to_gpus;           // their GPUs, as the coordinator sees them (empty: as each node does)
  std::vector<std::string> down;      // nodes that cannot serve as sources
  uint64_t digest = 0;                // of the coordinator's plan (0: not checked)
  uint64_t global_batch = 0;          // the job's datasets' new global batch (0: each keeps its own)
  // The job's datasets the repartition re-splits, each at the version the coordinator re-splits
  // from: a node that has another version (catching up) or re-splits other datasets refuses.
  // Absent (a coordinator of an older build): not checked.
  std::optional<std::map<std::string, uint64_t>> datasets;

  std::string record_key() const;
  std::string datasets_of() const { return job; }  // it re-splits the job's datasets
  void write(nlohmann::json& j) const;
  static ptc::Result<RepartitionChange> read(const nlohmann::json& j, const std::string& where);
};

// Re-splits the job's datasets (at the coordinator's versions, claimed first), then pulls and
// builds this node's new shards; the reply carries the bytes received.
ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const RepartitionChange& c, PrepareReply& reply);

}  // namespace ptcfs
