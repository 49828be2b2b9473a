// The change kind "save": a step saved into the mounts; each node commits the shards it wrote,
// and `holders` (per shard of the layout, node ids) says who holds what, the same on every node.
// Its struct, its members in peer.prepare, the record that decides it, and a node's prepare of
// its part: the shards it wrote, or, when it wrote none, a version that holds nothing (every
// mount shows every step).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/store/prepared.h"
#include "ptc/base/status.h"
#include "ptc/model.h"

namespace ptcfs {

struct PartContext;

struct SaveChange {
  static constexpr const char* kKind = "save";
  std::string job, step;
  ptc::Ptc ptc;
  std::vector<std::vector<std::string>> holders{};

  std::string record_key() const;
  std::string datasets_of() const { return {}; }
  void write(nlohmann::json& j) const;
  static ptc::Result<SaveChange> read(const nlohmann::json& j, const std::string& where);
};

// The reply carries, per shard held, a digest of its slices' XXH3s (replicas are compared).
ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const SaveChange& c, PrepareReply& reply);

}  // namespace ptcfs
