// The change kind "import" (docs/FORMATS.md "Data frames and peer operations"): every node
// reads the rank files of the shards it is placed to hold from `dir` ("{node}" in it stands for
// the node's id). Its struct, its members in peer.prepare, the record that decides it, and a
// node's prepare of its part.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/store/prepared.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct PartContext;

struct ImportChange {
  static constexpr const char* kKind = "import";
  std::string dir, job, step;
  std::vector<std::string> nodes;  // the placement
  std::vector<int> gpus;           // their GPUs, as the coordinator sees them (empty: as each node does)

  std::string record_key() const;
  std::string datasets_of() const { return {}; }  // changes no dataset
  void write(nlohmann::json& j) const;
  static ptc::Result<ImportChange> read(const nlohmann::json& j, const std::string& where);
};

// Reads this node's shards; the reply carries the shards and bytes read and a digest of the
// ptc.json seen (the coordinator compares them across the nodes).
ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const ImportChange& c, PrepareReply& reply);

}  // namespace ptcfs
