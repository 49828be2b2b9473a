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
#include "daemon/cluster/membership.h"
#include "ptc/base/json_util.h"
#include "ptc/base/status.h"
#include "ptc/model.h"

namespace ptcfs {

struct PartContext;
struct PreparedChange;

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
  static Result<RepartitionChange> read(const nlohmann::json& j, const std::string& where);
};

// Its members in peer.prepare, written and read here (header-only, so that the request's codec
// links without the store: tests/fuzz/fuzz_peer_reply.cc).
inline std::string RepartitionChange::record_key() const { return etcd_step_key(job, step); }

inline void RepartitionChange::write(nlohmann::json& j) const {
  j.update({{"job", job},
            {"step", step},
            {"from_version", from_version},
            {"ptc", ptc_json(ptc)},
            {"from_nodes", from_nodes},
            {"to", to.to_string()},
            {"to_nodes", to_nodes},
            {"down", down},
            {"digest", digest}});
  if (!from_holders.empty()) j["from_holders"] = from_holders;
  if (!from_gpus.empty()) j["from_gpus"] = from_gpus;
  if (!to_gpus.empty()) j["to_gpus"] = to_gpus;
  if (global_batch) j["global_batch"] = global_batch;
  if (datasets) j["datasets"] = *datasets;
}

inline Result<RepartitionChange> RepartitionChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(check_members(
      j,
      {"op", "tx", "kind", "coordinator", "lease", "job", "step", "from_version", "ptc", "from_nodes", "from_holders",
       "from_gpus", "to", "to_nodes", "to_gpus", "down", "digest", "global_batch", "datasets"},
      w));
  RepartitionChange c;
  PTC_ASSIGN_OR_RETURN(c.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.step, member_string(j, "step", w));
  PTC_ASSIGN_OR_RETURN(c.from_version, member_u64(j, "from_version", w));
  PTC_ASSIGN_OR_RETURN(c.ptc, ptc_member(j, "ptc", w));
  PTC_ASSIGN_OR_RETURN(c.from_nodes, member_strings(j, "from_nodes", w));
  PTC_ASSIGN_OR_RETURN(std::string to, member_string(j, "to", w));
  PTC_ASSIGN_OR_RETURN(c.to, ptc::parse_parallelism(to));
  PTC_ASSIGN_OR_RETURN(c.to_nodes, member_strings(j, "to_nodes", w));
  PTC_ASSIGN_OR_RETURN(c.from_gpus, member_gpus_or_empty(j, "from_gpus", w));
  PTC_ASSIGN_OR_RETURN(c.to_gpus, member_gpus_or_empty(j, "to_gpus", w));
  PTC_ASSIGN_OR_RETURN(c.down, member_strings(j, "down", w));
  PTC_ASSIGN_OR_RETURN(c.digest, member_u64_or(j, "digest", 0, w));
  PTC_ASSIGN_OR_RETURN(c.global_batch, member_u64_or(j, "global_batch", 0, w));
  if (j.contains("from_holders")) {
    PTC_ASSIGN_OR_RETURN(c.from_holders, member_string_lists(j, "from_holders", w));
  }
  if (j.contains("datasets")) {
    const nlohmann::json& d = j["datasets"];
    if (!d.is_object()) return invalid(w + ": 'datasets' must be an object of dataset name -> version");
    c.datasets.emplace();
    for (const auto& [name, version] : d.items()) {
      PTC_ASSIGN_OR_RETURN((*c.datasets)[name], member_u64(d, name.c_str(), w + ": datasets"));
    }
  }
  return c;
}

// Re-splits the job's datasets (at the coordinator's versions, claimed first), then pulls and
// builds this node's new shards; the reply carries the bytes received.
Result<PreparedChange> prepare_part(const PartContext& ctx, const RepartitionChange& c, PrepareReply& reply);

}  // namespace ptcfs
