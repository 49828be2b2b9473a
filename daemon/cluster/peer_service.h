// What this node answers its peers (the `peer.*` operations, docs/FORMATS.md): reads of
// slices it holds (peer.read, daemon/cluster/slab_read.h), dataset samples and tables,
// its state and counters, and its side of every two-phase change: peer.prepare builds this
// node's part of the change beside the current version, by kind, and hands it to the
// participant (daemon/cluster/participant.h), which holds it until peer.commit or peer.abort
// (or its record in etcd) decides it. The transport routes every
// `peer.*` request here (node.cc); the control service never sees them. Requests are sent
// by PeerClient (daemon/cluster/peer_client.h), which calls handle() in process for this
// node's own part.
//
// Peer ops are accepted from any authenticated connection: holding the cluster secret is
// what makes a peer. Thread-safety: handle() may be called concurrently.
#pragma once

#include <atomic>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/changes/change_kinds.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/participant.h"
#include "daemon/cluster/repartition_part.h"
#include "daemon/cluster/read_leases.h"
#include "daemon/cluster/slab_digests.h"
#include "daemon/save/save_service.h"
#include "daemon/store/store.h"
#include "transport/backend.h"
#include "transport/rpc.h"

namespace ptcfs {

class PeerService {
 public:
  // Everything must outlive this object; `self` is this node's index in `peers`; `saves` holds
  // the steps saved into this node's mount (peer.save_ready notes another node's complete
  // part there: SaveService::note_ready); `parts` holds this node's prepared parts.
  PeerService(Store& store, transport::PeerBackend& peers, int self, Membership& members, SaveService& saves,
              Participant& parts, PrepareOptions options)
      : store_(store), peers_(peers), self_(self), members_(members), saves_(saves), parts_(parts), options_(options) {
    parts_.on_replaced([this](std::shared_ptr<const StepVersion> v) { leases_.hold(std::move(v), kReplacedHold); });
  }
  ~PeerService() { parts_.on_replaced({}); }
  PeerService(const PeerService&) = delete;
  PeerService& operator=(const PeerService&) = delete;

  // How long a version this node replaced stays readable by peers that did not read it before:
  // a node stopped or slow through the commit reads on at the old version until it applies the
  // new one (the soak's SIGSTOP of 1-4 s; the coordinator waits --peer-timeout for it).
  static constexpr std::chrono::seconds kReplacedHold{10};

  // Every `peer.*` operation, dispatched by its "op" (the table in peer_service.cc). Errors: a
  // request without a string "op", or with an op no handler has, is kInvalidArgument; otherwise
  // the handler's own error (not_found for a step this node does not have, failed_precondition
  // from a fenced node), which goes back to the asking node as the reply's code and message
  // (docs/FORMATS.md "Data frames and peer operations").
  Result<transport::Reply> handle(const nlohmann::json& request);

  // Forgets the read leases of versions nobody read for a while (daemon/cluster/read_leases.h).
  void expire_reads() { leases_.expire(); }
  std::string id() const;
  uint64_t bytes_sent() const { return sent_.load(); }

 private:
  // The handlers of the table: each decodes its request (daemon/cluster/change_record.h).
  struct Op;
  static const Op kOps[];
  Result<transport::Reply> read(const nlohmann::json& req);
  Result<transport::Reply> prepare(const nlohmann::json& req);
  Result<transport::Reply> commit(const nlohmann::json& req);
  Result<transport::Reply> abort(const nlohmann::json& req);
  Result<transport::Reply> state(const nlohmann::json& req);
  Result<transport::Reply> stats(const nlohmann::json& req);
  // daemon/cluster/peer_service_saves.cc
  Result<transport::Reply> save_state(const nlohmann::json& req);
  Result<transport::Reply> save_ready(const nlohmann::json& req);
  Result<transport::Reply> dcp_files(const nlohmann::json& req);
  Result<transport::Reply> dcp_read(const nlohmann::json& req);
  Result<transport::Reply> dcp_convert(const nlohmann::json& req);
  // daemon/cluster/peer_service_datasets.cc
  Result<transport::Reply> serve_samples(const nlohmann::json& req);
  Result<transport::Reply> serve_table(const nlohmann::json& req);
  Result<transport::Reply> dataset_state(const nlohmann::json& req);

  Store& store_;
  transport::PeerBackend& peers_;
  int self_;
  Membership& members_;
  SaveService& saves_;
  Participant& parts_;
  PrepareOptions options_;
  std::atomic<uint64_t> sent_{0};
  SlabDigests digests_;  // of the windows peer.read served lately
  // The versions peer.read served lately, held for 60 s after each read, and the versions this
  // node replaced, for kReplacedHold (daemon/cluster/read_leases.h).
  ReadLeases leases_{std::chrono::seconds(60)};
};

}  // namespace ptcfs
