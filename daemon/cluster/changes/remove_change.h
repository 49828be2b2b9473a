// The change kind "remove": `ptcfs rm` of a committed step, removed by every node together. Its
// struct, its members in peer.prepare, the record that decides it, and a node's prepare.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/membership.h"
#include "ptc/base/json_util.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct PartContext;
struct PreparedChange;

struct RemoveChange {
  static constexpr const char* kKind = "remove";
  std::string job, step;

  std::string record_key() const;
  std::string datasets_of() const { return {}; }
  void write(nlohmann::json& j) const;
  static Result<RemoveChange> read(const nlohmann::json& j, const std::string& where);
};

// Its members in peer.prepare, written and read here (header-only, so that the request's codec
// links without the store: tests/fuzz/fuzz_peer_reply.cc).
inline std::string RemoveChange::record_key() const { return etcd_step_key(job, step); }

inline void RemoveChange::write(nlohmann::json& j) const { j.update({{"job", job}, {"step", step}}); }

inline Result<RemoveChange> RemoveChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(check_members(j, {"op", "tx", "kind", "coordinator", "lease", "job", "step"}, w));
  RemoveChange c;
  PTC_ASSIGN_OR_RETURN(c.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.step, member_string(j, "step", w));
  return c;
}

// Claims the step as changing; a node that never had it prepares an empty part.
Result<PreparedChange> prepare_part(const PartContext& ctx, const RemoveChange& c, PrepareReply& reply);

}  // namespace ptcfs
