// The change kind "remove": `ptcfs rm` of a committed step, removed by every node together. Its
// struct, its members in peer.prepare, the record that decides it, and a node's prepare.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/store/prepared.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct PartContext;

struct RemoveChange {
  static constexpr const char* kKind = "remove";
  std::string job, step;

  std::string record_key() const;
  std::string datasets_of() const { return {}; }
  void write(nlohmann::json& j) const;
  static ptc::Result<RemoveChange> read(const nlohmann::json& j, const std::string& where);
};

// Claims the step as changing; a node that never had it prepares an empty part.
ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const RemoveChange& c, PrepareReply& reply);

}  // namespace ptcfs
