// The records ptcfs keeps in etcd (docs/FORMATS.md "Keys in etcd"): a step's committed
// version, a dataset's, and a live node's registration. One typed struct per record and one
// JSON codec for each that never throws. Every node reads these on its watch thread, and
// anyone with access to etcd may have written them (etcdctl, a faulty client): a record that
// does not decode is refused with the member at fault, and the caller logs its key and skips
// it, so that it can neither kill the watch nor pass for a commit.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"

namespace ptcfs {

// `/ptcfs/steps/<job>/<step>`: the step's committed version. `kind` is "import",
// "repartition", "save" or "remove"; it may be empty only in a fence written where there was
// no record (`{"removed": true, "fenced": tx}`).
struct StepRecord {
  std::string kind;
  uint64_t version = 0;  // at least 1 for an import, repartition or save; 0 for a removal
  std::string tx, coordinator;
  std::vector<std::string> nodes;                 // the placement, node ids in rank order
  std::vector<int> gpus;                          // their GPUs when it was made (empty: not pinned)
  std::string parallelism;                        // "tp=T,pp=P,dp=D" (empty: not given)
  std::vector<std::vector<std::string>> holders;  // a save: per shard, the nodes holding it
  bool removed = false;
  std::string fenced;  // the undecided transaction this write shut out (TwoPhase::settle_undecided)
};
nlohmann::json to_json(const StepRecord& r);
Result<StepRecord> step_record_from_json(const nlohmann::json& j, const std::string& where);

// `/ptcfs/datasets/<job>/<name>`: the dataset's committed version. `kind` is "dataset_add" or
// "dataset_progress" (empty only in a fence written where there was no record).
struct DatasetRecord {
  std::string kind;
  uint64_t version = 0;  // a progress: the new version; 0 for an add
  std::string tx, coordinator;
  bool removed = false;
  std::string fenced;
};
nlohmann::json to_json(const DatasetRecord& r);
Result<DatasetRecord> dataset_record_from_json(const nlohmann::json& j, const std::string& where);

// `/ptcfs/nodes/<id>`: a live node, where peers reach it.
struct NodeRecord {
  std::string id, addr;
  int gpus = 1;  // 1 to 65536, as ptcfsd --gpus takes
};
nlohmann::json to_json(const NodeRecord& r);
// `id` is the id in the key; the record must name the same one.
Result<NodeRecord> node_record_from_json(const nlohmann::json& j, const std::string& id);

// A step's or a dataset's record as the watch delivers it, decoded by its key.
struct KeyedRecord {
  std::string key;
  std::string job, name;  // the step's job and step, or the dataset's job and name
  std::variant<StepRecord, DatasetRecord> value;

  bool is_step() const { return std::holds_alternative<StepRecord>(value); }
  const std::string& tx() const;
  uint64_t version() const;
  bool removed() const;
};
// kNotFound when `key` names no step or dataset (a node's registration, a lock, anything
// else); kInvalidArgument, naming the key and the member at fault, when the value is not a
// record of its kind.
Result<KeyedRecord> keyed_record(const std::string& key, const nlohmann::json& value);
// Whether `value`, the record of `key` as read (null where there is none), decodes and was
// written by transaction `tx`: the record that decides `tx` says it committed.
bool written_by(const std::string& key, const nlohmann::json& value, const std::string& tx);

}  // namespace ptcfs
