// The change kind "dataset_add": a dataset added on its home node; every other node pulls its
// sample table from the home (peer.dataset_table) into a blob of its own. Its struct, its members
// in peer.prepare, the record that decides it, and a node's prepare of its part.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/store/prepared.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct PartContext;

struct DatasetAddChange {
  static constexpr const char* kKind = "dataset_add";
  std::string job, name;
  nlohmann::json record;  // the home's metadata record of the dataset

  std::string record_key() const;
  std::string datasets_of() const { return {}; }  // a new name, claimed as such
  void write(nlohmann::json& j) const;
  static ptc::Result<DatasetAddChange> read(const nlohmann::json& j, const std::string& where);
};

ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const DatasetAddChange& c, PrepareReply& reply);

}  // namespace ptcfs
