// The change kind "dataset_add": a dataset added on its home node; every other node pulls its
// sample table from the home (peer.dataset_table) into a blob of its own. Its struct, its members
// in peer.prepare, the record that decides it, and a node's prepare of its part.
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

struct DatasetAddChange {
  static constexpr const char* kKind = "dataset_add";
  std::string job, name;
  nlohmann::json record;  // the home's metadata record of the dataset

  std::string record_key() const;
  std::string datasets_of() const { return {}; }  // a new name, claimed as such
  void write(nlohmann::json& j) const;
  static Result<DatasetAddChange> read(const nlohmann::json& j, const std::string& where);
};

// Its members in peer.prepare, written and read here (header-only, so that the request's codec
// links without the store: tests/fuzz/fuzz_peer_reply.cc).
inline std::string DatasetAddChange::record_key() const { return etcd_dataset_key(job, name); }

inline void DatasetAddChange::write(nlohmann::json& j) const {
  j.update({{"job", job}, {"name", name}, {"record", record}});
}

inline Result<DatasetAddChange> DatasetAddChange::read(const nlohmann::json& j, const std::string& w) {
  PTC_RETURN_IF_ERROR(check_members(j, {"op", "tx", "kind", "coordinator", "lease", "job", "name", "record"}, w));
  DatasetAddChange c;
  PTC_ASSIGN_OR_RETURN(c.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(c.name, member_string(j, "name", w));
  auto it = j.find("record");
  if (it == j.end() || !it->is_object()) return invalid(w + " lacks 'record'");
  c.record = *it;
  return c;
}

Result<PreparedChange> prepare_part(const PartContext& ctx, const DatasetAddChange& c, PrepareReply& reply);

}  // namespace ptcfs
