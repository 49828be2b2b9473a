// The change kind "save": a step saved into the mounts; each node commits the shards it wrote,
// and `holders` (per shard of the layout, node ids) says who holds what, the same on every node.
// Its struct, its members in peer.prepare, the record that decides it, and a node's prepare of
// its part: the shards it wrote, or, when it wrote none, a version that holds nothing (every
// mount shows every step).
#pragma once

#include <string>
#include <utility>
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

struct SaveChange {
  static constexpr const char* kKind = "save";
  std::string job, step;
  ptc::Ptc ptc;
  std::vector<std::vector<std::string>> holders{};

  std::string record_key() const;
  std::string datasets_of() const { return {}; }
  // The step its nodes wrote into their mounts: each node's save service hears how its part went.
  std::pair<std::string, std::string> saved_step() const { return {job, step}; }
  void write(nlohmann::json& j) const;
  static Result<SaveChange> read(const nlohmann::json& j, const std::string& where);
};

// Its members in peer.prepare, written and read here (header-only, so that the request's codec
// links without the store: tests/fuzz/fuzz_peer_reply.cc).
inline std::string SaveChange::record_key() const { return etcd_step_key(job, step); }

inline void SaveChange::write(nlohmann::json& j) const {
  j.update({{"job", job}, {"step", step}, {"ptc", ptc_json(ptc)}, {"holders", holders}});
}

inline Result<SaveChange> SaveChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(
      check_members(j, {"op", "tx", "kind", "coordinator", "lease", "job", "step", "ptc", "holders"}, w));
  SaveChange c;
  PTC_ASSIGN_OR_RETURN(c.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.step, member_string(j, "step", w));
  PTC_ASSIGN_OR_RETURN(c.ptc, ptc_member(j, "ptc", w));
  PTC_ASSIGN_OR_RETURN(c.holders, member_string_lists(j, "holders", w));
  return c;
}

// The reply carries, per shard held, a digest of its slices' XXH3s (replicas are compared).
Result<PreparedChange> prepare_part(const PartContext& ctx, const SaveChange& c, PrepareReply& reply);

}  // namespace ptcfs
