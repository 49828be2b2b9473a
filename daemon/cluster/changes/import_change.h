// The change kind "import" (docs/FORMATS.md "Data frames and peer operations"): every node
// reads the rank files of the shards it is placed to hold from `dir` ("{node}" in it stands for
// the node's id). Its struct, its members in peer.prepare, the record that decides it, and a
// node's prepare of its part.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/membership.h"
#include "ptc/base/json_util.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct PartContext;
struct PreparedChange;

struct ImportChange {
  static constexpr const char* kKind = "import";
  std::string dir, job, step;
  std::vector<std::string> nodes;  // the placement
  std::vector<int> gpus;           // their GPUs, as the coordinator sees them (empty: as each node does)

  std::string record_key() const;
  std::string datasets_of() const { return {}; }  // changes no dataset
  void write(nlohmann::json& j) const;
  static Result<ImportChange> read(const nlohmann::json& j, const std::string& where);
};

// Its members in peer.prepare, written and read here (header-only, so that the request's codec
// links without the store: tests/fuzz/fuzz_peer_reply.cc).
inline std::string ImportChange::record_key() const { return etcd_step_key(job, step); }

inline void ImportChange::write(nlohmann::json& j) const {
  j.update({{"dir", dir}, {"job", job}, {"step", step}, {"nodes", nodes}});
  if (!gpus.empty()) j["gpus"] = gpus;
}

inline Result<ImportChange> ImportChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(
      check_members(j, {"op", "tx", "kind", "coordinator", "lease", "dir", "job", "step", "nodes", "gpus"}, w));
  ImportChange c;
  PTC_ASSIGN_OR_RETURN(c.dir, member_string(j, "dir", w));
  PTC_ASSIGN_OR_RETURN(c.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.step, member_string(j, "step", w));
  PTC_ASSIGN_OR_RETURN(c.nodes, member_strings(j, "nodes", w));
  PTC_ASSIGN_OR_RETURN(c.gpus, member_gpus_or_empty(j, "gpus", w));
  return c;
}

// Reads this node's shards; the reply carries the shards and bytes read and a digest of the
// ptc.json seen (the coordinator compares them across the nodes).
Result<PreparedChange> prepare_part(const PartContext& ctx, const ImportChange& c, PrepareReply& reply);

}  // namespace ptcfs
