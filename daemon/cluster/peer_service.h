// What this node answers its peers (the `peer.*` operations, docs/FORMATS.md): reads of
// slices it holds (peer.read, daemon/cluster/slab_read.h), dataset samples and tables,
// its state and counters, and its side of every two-phase change: peer.prepare builds the
// change beside the current version and holds it under its transaction id, peer.commit
// commits it (daemon/store/prepared.h), peer.abort drops it. The transport routes every
// `peer.*` request here (node.cc); the control service never sees them. Requests are sent
// by PeerClient (daemon/cluster/peer_client.h), which calls handle() in process for this
// node's own part.
//
// Peer ops are accepted from any authenticated connection: holding the cluster secret is
// what makes a peer. Thread-safety: handle() may be called concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/repartition_part.h"
#include "daemon/cluster/read_leases.h"
#include "daemon/cluster/slab_digests.h"
#include "daemon/save/save_service.h"
#include "daemon/store/prepared.h"
#include "daemon/store/store.h"
#include "transport/backend.h"
#include "transport/rpc.h"

namespace ptcfs {

class PeerService {
 public:
  // Everything must outlive this object; `self` is this node's index in `peers`; `saves` holds
  // the steps saved into this node's mount (peer.save_ready notes another node's complete
  // part there: SaveService::note_ready).
  PeerService(Store& store, transport::PeerBackend& peers, int self, Membership& members, SaveService& saves,
              PrepareOptions options)
      : store_(store), peers_(peers), self_(self), members_(members), saves_(saves), options_(options) {}

  // Every `peer.*` operation, dispatched by its "op" (the table in peer_service.cc).
  ptc::Result<transport::Reply> handle(const nlohmann::json& request);

  // Holds a change this node prepared itself under `tx` (the home node of a dataset add:
  // its peers pull the sample table from it before anyone commits), for the record `key`.
  void hold(const std::string& tx, PreparedChange change, const std::string& key);
  // Commits `tx` if this node holds it prepared (its record was seen in etcd), or waits for
  // its commit under way; whether `tx` is committed here (by this call or before).
  bool commit_decided(const std::string& tx);
  // A record of `key` written by transaction `tx` at `version` (0: none; `removed`: the step
  // was removed): a change prepared here for the same key under another transaction can
  // never commit any more (the record moved past what it was prepared against) and is
  // aborted. `tx` empty: the other nodes are at `version` (a dataset's catch-up), and a change
  // prepared here to make a version no newer, held at least `held` (its commit is not on its way
  // any more), is aborted: what the others have replaces it.
  void drop_superseded(const std::string& key, const std::string& tx, uint64_t version, bool removed,
                       std::chrono::seconds held = std::chrono::seconds(0));
  // On start, before the records are read: the changes this node had prepared (and kept,
  // daemon/store/prepared_record.h) when it stopped wait again for their decision, under the
  // coordinator's lease they were prepared for. Without etcd nothing decides them: aborted.
  void restore();
  // Drops prepared changes whose coordinator's lease ended (committing instead those its
  // record shows committed), and any older than `max_age`. Returns how many were dropped.
  size_t expire(std::chrono::seconds max_age);
  std::string id() const;
  uint64_t bytes_sent() const { return sent_.load(); }
  // Changes prepared here and not yet decided (for the metrics).
  size_t prepared_count() {
    std::lock_guard lock(mu_);
    return prepared_.size();
  }

 private:
  // The handlers of the table: each decodes its request (daemon/cluster/change_record.h).
  struct Op;
  static const Op kOps[];
  ptc::Result<transport::Reply> read(const nlohmann::json& req);
  ptc::Result<transport::Reply> prepare(const nlohmann::json& req);
  ptc::Result<transport::Reply> commit(const nlohmann::json& req);
  ptc::Result<transport::Reply> abort(const nlohmann::json& req);
  ptc::Status finish(const std::string& tx, bool commit, const std::string& why = {});
  // An aborted change undone: its blobs, its kept record, its save's part.
  // `why`: an abort trying again would not undo (FinishRequest::why); a save's part then fails.
  void drop(const std::string& tx, PreparedChange& change, bool kept, const std::string& why = {});
  // The (job, step) of the save prepared under `tx`, taken out; none for other changes.
  std::optional<std::pair<std::string, std::string>> take_saving(const std::string& tx);
  ptc::Result<transport::Reply> state(const nlohmann::json& req);
  ptc::Result<transport::Reply> stats(const nlohmann::json& req);
  ptc::Result<PreparedChange> prepare_import(const ImportChange& c, PrepareReply& reply);
  // daemon/cluster/peer_service_saves.cc
  ptc::Result<transport::Reply> save_state(const nlohmann::json& req);
  ptc::Result<transport::Reply> save_ready(const nlohmann::json& req);
  ptc::Result<transport::Reply> dcp_files(const nlohmann::json& req);
  ptc::Result<transport::Reply> dcp_read(const nlohmann::json& req);
  ptc::Result<transport::Reply> dcp_convert(const nlohmann::json& req);
  ptc::Result<PreparedChange> prepare_save(const SaveChange& c, PrepareReply& reply);
  // daemon/cluster/peer_service_datasets.cc
  ptc::Result<transport::Reply> serve_samples(const nlohmann::json& req);
  ptc::Result<transport::Reply> serve_table(const nlohmann::json& req);
  ptc::Result<transport::Reply> dataset_state(const nlohmann::json& req);
  ptc::Result<PreparedChange> prepare_dataset_add(const std::string& tx, const DatasetAddChange& c);

  Store& store_;
  transport::PeerBackend& peers_;
  int self_;
  Membership& members_;
  SaveService& saves_;
  PrepareOptions options_;
  std::atomic<uint64_t> sent_{0};
  SlabDigests digests_;  // of the windows peer.read served lately
  // The versions peer.read served lately, held for 60 s after each read (daemon/cluster/read_leases.h).
  ReadLeases leases_{std::chrono::seconds(60)};
  // A prepared change, the record that decides it, and who prepared it under which lease.
  struct Held {
    PreparedChange change;
    std::string key, coordinator;
    int64_t lease = 0;
    std::chrono::steady_clock::time_point since;
    bool kept = false;  // its record is in the metadata until it is decided
  };
  std::mutex mu_;                         // guards prepared_, committing_, committed_, aborted_, recorded_, saving_
  std::map<std::string, Held> prepared_;  // by transaction id
  // Commits under way (a transaction leaves prepared_ when its commit starts): a second commit
  // of one (the coordinator's peer.commit and the record seen in etcd race) waits for the
  // first's outcome, so that no node answers "committed" before it serves the new version.
  std::map<std::string, std::shared_future<ptc::Status>> committing_;
  std::deque<std::string> committed_;  // the last transactions committed
  // The last transactions aborted before this node had prepared them: an abort that comes while
  // the prepare still runs (this node was slow or stopped, the coordinator gave up on it) is
  // answered at once, and the prepare that finishes later must not keep its change.
  std::deque<std::string> aborted_;
  // The last transactions whose etcd record (their commit) was seen while this node did not hold
  // them prepared: a prepare that finishes after its record was read (the node was slow or
  // stopped; the others committed without it) commits at once instead of waiting to expire.
  std::deque<std::string> recorded_;
  std::map<std::string, std::pair<std::string, std::string>> saving_;  // tx -> (job, step) of a save prepared here
};

}  // namespace ptcfs
