// Prepared changes kept in the metadata until they are decided. A node that answered
// "prepared" to a coordinator promised to commit if the coordinator decides so; when the
// node restarts before the decision reaches it, the change must still be there, or the
// shards it placed on this node would be lost with the commit (docs/ARCHITECTURE.md "A
// cluster"). Each change is one record, "prepared/<tx>" (docs/FORMATS.md): the
// records of its new step version and dataset versions as they would be committed, the
// versions it replaces, and the blobs it holds (Store::open keeps those pending).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/store/prepared.h"

namespace ptcfs {

struct KeptChange {
  std::string tx;
  PreparedChange change;
  nlohmann::json about;  // as given to keep_prepared (who decides the change)
};

// Whether a change can be kept: a change of a step (import, repartition, save, removal) and of
// datasets' positions; not one that reserves new dataset names.
bool can_keep(const PreparedChange& change);
// Writes the record of `change` (synced) with `about` (a JSON object) beside it, and marks
// the change kept: destroyed undecided (the daemon stops), it leaves its blobs to the record.
Status keep_prepared(Store& store, const std::string& tx, PreparedChange& change, const nlohmann::json& about);
// Removes the record (after the change is committed or aborted); failures are logged.
void forget_prepared(Store& store, const std::string& tx);
// After a restart: every kept change, rebuilt (kept), its step claimed again and its blobs
// pending. A record whose change is committed already (the node
// stopped between the commit and forgetting it) is forgotten; one whose base moved on (the
// step is at another version) is forgotten and its blobs removed; so is a malformed one,
// with a warning naming it.
std::vector<KeptChange> restore_prepared(Store& store);

}  // namespace ptcfs
