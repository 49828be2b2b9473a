// Every kind of cluster change, and peer.prepare, the request that carries one. Each kind is one
// header beside this one holding its struct, its members in the request and the record that
// decides it, with a node's prepare of its part (`prepare_part`) in the .cc of the same name; it
// is registered by its line in AnyChange below. The request's codec, the record key and the
// prepare (part_context.h) dispatch over the variant. Adding a kind touches its files, that line
// and its tests here; what starts it is the coordinator's method, the ChangeRunner entry and the
// control request that name it, and any member of its own in PrepareReply (docs/ARCHITECTURE.md
// "A cluster"). The codec needs no store: the fuzz
// target of peer replies links it alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/changes/dataset_add_change.h"
#include "daemon/cluster/changes/dataset_progress_change.h"
#include "daemon/cluster/changes/import_change.h"
#include "daemon/cluster/changes/remove_change.h"
#include "daemon/cluster/changes/repartition_change.h"
#include "daemon/cluster/changes/save_change.h"
#include "ptc/base/status.h"

namespace ptcfs {

// The registry: one line per kind (its "kind" in the request is its kKind).
using AnyChange =
    std::variant<ImportChange, RepartitionChange, DatasetAddChange, DatasetProgressChange, SaveChange, RemoveChange>;

// peer.prepare: transaction `tx` and its change; the coordinator that asks and its etcd lease
// (0: static mode): the prepared change lives only as long as that lease.
struct PrepareRequest {
  std::string tx;
  AnyChange change;
  std::string coordinator;
  int64_t lease = 0;
};
nlohmann::json to_json(const PrepareRequest& r);
Result<PrepareRequest> prepare_request_from_json(const nlohmann::json& j);

// The kind's name ("import").
const char* kind_of(const AnyChange& c);
// The etcd key of the record that decides the change (a step's or a dataset's).
std::string record_key(const AnyChange& c);
// The job whose datasets the change may change (a progress; a repartition re-splits them);
// empty when it changes none.
std::string datasets_of(const AnyChange& c);
// The job and step a save wrote into the mounts (a kind with a `saved_step()`: its part is told its
// commit's outcome); none for the other kinds.
std::optional<std::pair<std::string, std::string>> saved_step(const AnyChange& c);
// (This node's part of a change, by its kind: prepare_part in daemon/cluster/changes/part_context.h.)

}  // namespace ptcfs
