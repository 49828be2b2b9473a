#include "daemon/cluster/etcd_record.h"

#include "daemon/cluster/membership.h"
#include "ptc/base/json_util.h"
#include "ptc/model.h"

namespace ptcfs {

using nlohmann::json;

namespace {

constexpr const char* kStepKinds[] = {"import", "repartition", "save", "remove"};
constexpr const char* kDatasetKinds[] = {"dataset_add", "dataset_progress"};

// The record's kind, one of `kinds`; absent only in a fence written where there was no record.
template <size_t N>
Result<std::string> kind_of(const json& j, const char* const (&kinds)[N], const std::string& fenced,
                            const std::string& where) {
  PTC_ASSIGN_OR_RETURN(std::string kind, member_string_or(j, "kind", "", where));
  if (kind.empty()) {
    if (fenced.empty()) return invalid(where + " lacks 'kind'");
    return kind;
  }
  for (const char* k : kinds)
    if (kind == k) return kind;
  return invalid(where + ": unknown kind '" + kind + "'");
}

// The members step and dataset records share; an empty or zero one is left out.
template <typename R>
json common_json(const R& r) {
  json j = json::object();
  if (!r.kind.empty()) j["kind"] = r.kind;
  if (r.version != 0) j["version"] = r.version;
  if (!r.tx.empty()) j["tx"] = r.tx;
  if (!r.coordinator.empty()) j["coordinator"] = r.coordinator;
  if (r.removed) j["removed"] = true;
  if (!r.fenced.empty()) j["fenced"] = r.fenced;
  return j;
}

template <typename R, size_t N>
Status read_common(const json& j, const char* const (&kinds)[N], const std::string& where, R& r) {
  PTC_ASSIGN_OR_RETURN(r.fenced, member_string_or(j, "fenced", "", where));
  PTC_ASSIGN_OR_RETURN(r.kind, kind_of(j, kinds, r.fenced, where));
  PTC_ASSIGN_OR_RETURN(r.version, member_u64_or(j, "version", 0, where));
  PTC_ASSIGN_OR_RETURN(r.tx, member_string_or(j, "tx", "", where));
  PTC_ASSIGN_OR_RETURN(r.coordinator, member_string_or(j, "coordinator", "", where));
  PTC_ASSIGN_OR_RETURN(r.removed, member_bool_or(j, "removed", false, where));
  return Status::ok();
}

}  // namespace

json to_json(const StepRecord& r) {
  json j = common_json(r);
  if (!r.nodes.empty()) j["nodes"] = r.nodes;
  if (!r.gpus.empty()) j["gpus"] = r.gpus;
  if (!r.parallelism.empty()) j["parallelism"] = r.parallelism;
  if (!r.holders.empty()) j["holders"] = r.holders;
  return j;
}

Result<StepRecord> step_record_from_json(const json& j, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_members(
      j, {"kind", "version", "tx", "coordinator", "nodes", "gpus", "parallelism", "holders", "removed", "fenced"},
      where));
  StepRecord r;
  PTC_RETURN_IF_ERROR(read_common(j, kStepKinds, where, r));
  if (j.contains("nodes")) {
    PTC_ASSIGN_OR_RETURN(r.nodes, member_strings(j, "nodes", where));
  }
  PTC_ASSIGN_OR_RETURN(r.gpus, member_gpus_or_empty(j, "gpus", where));
  PTC_ASSIGN_OR_RETURN(r.parallelism, member_string_or(j, "parallelism", "", where));
  if (!r.parallelism.empty()) {
    PTC_RETURN_IF_ERROR(ptc::parse_parallelism(r.parallelism).status(), where + " field 'parallelism'");
  }
  if (j.contains("holders")) {
    PTC_ASSIGN_OR_RETURN(r.holders, member_string_lists(j, "holders", where));
  }
  // A record that commits a version says which; one that removes the step says so.
  const bool removal = r.kind == "remove" || r.kind.empty();
  if (removal != r.removed) return invalid(where + ": 'removed' must be true exactly for a removal");
  if (!removal && r.version == 0) return invalid(where + " lacks 'version' (at least 1)");
  if (!r.gpus.empty() && r.gpus.size() != r.nodes.size())
    return invalid(where + ": 'gpus' must give one count per node of 'nodes'");
  return r;
}

json to_json(const DatasetRecord& r) { return common_json(r); }

Result<DatasetRecord> dataset_record_from_json(const json& j, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_members(j, {"kind", "version", "tx", "coordinator", "removed", "fenced"}, where));
  DatasetRecord r;
  PTC_RETURN_IF_ERROR(read_common(j, kDatasetKinds, where, r));
  if (r.removed != r.kind.empty()) return invalid(where + ": 'removed' is only a fence's, where there was no record");
  if (r.kind == "dataset_progress" && r.version == 0) return invalid(where + " lacks 'version' (at least 1)");
  return r;
}

json to_json(const NodeRecord& r) { return {{"id", r.id}, {"addr", r.addr}, {"gpus", r.gpus}}; }

Result<NodeRecord> node_record_from_json(const json& j, const std::string& id) {
  const std::string where = "etcd record of node " + id;
  PTC_RETURN_IF_ERROR(ptc::validate_id("node", id), where);
  PTC_RETURN_IF_ERROR(check_members(j, {"id", "addr", "gpus"}, where));
  NodeRecord r;
  PTC_ASSIGN_OR_RETURN(r.id, member_string(j, "id", where));
  if (r.id != id) return invalid(where + " names node '" + r.id + "'");
  PTC_ASSIGN_OR_RETURN(r.addr, member_string(j, "addr", where));
  if (r.addr.empty()) return invalid(where + " has an empty 'addr'");
  if (auto it = j.find("gpus"); it != j.end()) {
    PTC_ASSIGN_OR_RETURN(const int64_t gpus, get_int(*it, where + " field 'gpus'", 1, 1 << 16));
    r.gpus = static_cast<int>(gpus);
  }
  return r;
}

const std::string& KeyedRecord::tx() const {
  return std::visit([](const auto& r) -> const std::string& { return r.tx; }, value);
}

uint64_t KeyedRecord::version() const {
  return std::visit([](const auto& r) { return r.version; }, value);
}

bool KeyedRecord::removed() const {
  return std::visit([](const auto& r) { return r.removed; }, value);
}

Result<KeyedRecord> keyed_record(const std::string& key, const json& value) {
  KeyedRecord out;
  out.key = key;
  const bool step = parse_etcd_step_key(key, out.job, out.name);
  if (!step && !parse_etcd_dataset_key(key, out.job, out.name)) return not_found(key + " is no step or dataset key");
  const std::string where = "etcd key " + key;
  PTC_RETURN_IF_ERROR(ptc::validate_id("job", out.job), where);
  PTC_RETURN_IF_ERROR(ptc::validate_id(step ? "step" : "dataset", out.name), where);
  if (step) {
    PTC_ASSIGN_OR_RETURN(out.value, step_record_from_json(value, where));
  } else {
    PTC_ASSIGN_OR_RETURN(out.value, dataset_record_from_json(value, where));
  }
  return out;
}

bool written_by(const std::string& key, const json& value, const std::string& tx) {
  auto rec = keyed_record(key, value);
  return rec && rec->tx() == tx;
}

}  // namespace ptcfs
