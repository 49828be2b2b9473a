// The newest record etcd holds for each step and dataset, as the watch delivered them, and which
// of them this node is behind on (docs/ARCHITECTURE.md "What holds under faults": a node back
// from a restart serves its mount once it has caught up with them). Pure: what the node serves is
// asked through a function.
//
// Thread-safety: all methods may be called concurrently (the watch notes, the node asks).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/cluster/etcd_record.h"

namespace ptcfs {

// What a node serves of a step or dataset: its version number (0: none) and, for a step, the
// version's origin (StepVersion::origin; empty where unknown).
struct ServedVersion {
  uint64_t version = 0;
  std::string origin;
};

struct RecordMark {
  std::string job, name;  // the step's job and step, or the dataset's job and name
  bool step = true;
  uint64_t version = 0;
  bool removed = false;
  std::string tx;  // the transaction that wrote the record: the origin of the version it names

  std::string what() const;  // "step j/1 version 3", "dataset j/d version 2", "removed step j/1"
  // Whether a node serving `have` of it is behind on this record: a step at an older version or
  // missing, a step removed that it still serves, a dataset it serves at an older version. A
  // step at the record's version number but of another origin is behind too (the step was removed
  // and saved again under its name while the node was away: the same number, other bytes); an
  // origin unknown on either side counts as the same. A dataset it does not have is not counted
  // (a node takes a dataset's position, never the dataset).
  bool lags(const ServedVersion& have) const;
  // A step's record names a version of the same number as `have` but another origin.
  bool replaces(const ServedVersion& have) const;
};
RecordMark mark_of(const KeyedRecord& record);

class RecordLedger {
 public:
  // What this node serves of a step or dataset.
  using Served = std::function<ServedVersion(const RecordMark&)>;

  void note(const KeyedRecord& record);
  // The records this node is behind on (RecordMark::lags).
  std::vector<RecordMark> behind(const Served& served) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, RecordMark> newest_;  // by etcd key
};

}  // namespace ptcfs
