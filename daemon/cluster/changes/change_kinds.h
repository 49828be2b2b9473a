// Every kind of cluster change, and peer.prepare, the request that carries one. Each kind is one
// file beside this one holding its struct, its members in the request, the record that decides
// it and a node's prepare of its part (`prepare_part`); it is registered by its line in
// AnyChange below. The request's codec, the record key and the prepare dispatch over the
// variant, so adding a kind touches its file, that line and its tests (docs/ARCHITECTURE.md
// "A cluster").
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/changes/dataset_add_change.h"
#include "daemon/cluster/changes/dataset_progress_change.h"
#include "daemon/cluster/changes/import_change.h"
#include "daemon/cluster/changes/remove_change.h"
#include "daemon/cluster/changes/repartition_change.h"
#include "daemon/cluster/changes/save_change.h"
#include "daemon/store/prepared.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct PartContext;

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
ptc::Result<PrepareRequest> prepare_request_from_json(const nlohmann::json& j);

// The kind's name ("import").
const char* kind_of(const AnyChange& c);
// The etcd key of the record that decides the change (a step's or a dataset's).
std::string record_key(const AnyChange& c);
// The job whose datasets the change may change (a progress; a repartition re-splits them);
// empty when it changes none.
std::string datasets_of(const AnyChange& c);
// This node's part of the change, by its kind.
ptc::Result<PreparedChange> prepare_part(const PartContext& ctx, const AnyChange& c, PrepareReply& reply);

}  // namespace ptcfs
