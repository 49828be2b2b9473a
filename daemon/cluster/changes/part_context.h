// What a node needs to prepare its part of a change, whatever its kind: each kind's
// prepare_part (daemon/cluster/changes/) gets it from the peer service, which decodes
// peer.prepare and hands the part to the participant (daemon/cluster/participant.h).
#pragma once

#include <string>

#include "daemon/cluster/changes/change_kinds.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/repartition_part.h"
#include "daemon/save/save_service.h"
#include "daemon/store/prepared.h"
#include "daemon/store/store.h"
#include "transport/backend.h"

namespace ptcfs {

struct PartContext {
  Store& store;
  transport::PeerBackend& peers;
  int self;        // this node's index in `peers`
  std::string id;  // and its id
  Membership& members;
  SaveService& saves;
  const PrepareOptions& options;
  std::string tx;  // the change's transaction
};

// This node's part of the change `c`, by its kind (each kind's prepare_part).
Result<PreparedChange> prepare_part(const PartContext& ctx, const AnyChange& c, PrepareReply& reply);

}  // namespace ptcfs
