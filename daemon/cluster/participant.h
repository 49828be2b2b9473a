// This node's half of every two-phase change, the twin of the coordinator's TwoPhase
// (daemon/cluster/two_phase.h; docs/ARCHITECTURE.md "A cluster"): the table of the
// transactions this node takes part in, each in one state,
//
//   preparing -> prepared -> committing -> committed
//   preparing or prepared -> aborted  (and committing -> aborted when the commit fails)
//
// and the early memories a slow node needs: an abort that came before (or while) this node
// prepared (the coordinator gave up on it), and a record (the decision, read in etcd) that came
// before it held its part (the others committed without it). It keeps a prepared part across a
// restart (daemon/store/prepared_record.h) and restores it; it drops a part whose record moved
// past it (superseded) or whose coordinator's lease ended, and commits instead one whose record
// shows it committed.
//
// PeerService (daemon/cluster/peer_service.h) decodes peer.prepare/commit/abort and builds each
// kind's part; the coordinator holds its own part of a dataset add here; the follower
// (daemon/cluster/follower.h) reports the records it reads. Every decision goes through
// commit_change or abort_change (daemon/store/prepared.h); a save's part is told its outcome
// (SaveService::take_back, part_done).
//
// Thread-safety: every method may be called from any thread. The table is under one mutex that
// is never held while a change commits, aborts or is kept.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "daemon/cluster/membership.h"
#include "daemon/save/save_service.h"
#include "daemon/store/prepared.h"
#include "daemon/store/store.h"

namespace ptcfs {

// Where a transaction stands on this node. kUnknown: never seen, or forgotten (the memories of
// decided transactions hold the last 256 of each kind).
enum class TxState { kUnknown, kPreparing, kPrepared, kCommitting, kCommitted, kAborted };
std::string_view to_string(TxState s);

class Participant {
 public:
  // Who decides a prepared part: its record's key in etcd, the coordinator, and the lease the
  // coordinator prepared it under (0 in static mode: nothing decides it after a restart).
  struct Decider {
    std::string key, coordinator;
    int64_t lease = 0;
  };
  // The step of a save whose part a change commits (SaveService's pending step).
  struct SavePart {
    std::string job, step;
  };

  // A prepare under way: begin() hands it out, prepared() takes it back with the part. Destroyed
  // without being handed back (the prepare failed), the transaction stops preparing. Move-only.
  class Preparing {
   public:
    Preparing(Preparing&& o) noexcept : table_(std::exchange(o.table_, nullptr)), tx_(std::move(o.tx_)) {}
    Preparing& operator=(Preparing&& o) noexcept {
      if (this != &o) {
        end();
        table_ = std::exchange(o.table_, nullptr);
        tx_ = std::move(o.tx_);
      }
      return *this;
    }
    Preparing(const Preparing&) = delete;
    Preparing& operator=(const Preparing&) = delete;
    ~Preparing() { end(); }
    const std::string& tx() const { return tx_; }

   private:
    friend class Participant;
    Preparing(Participant* table, std::string tx) : table_(table), tx_(std::move(tx)) {}
    void end();  // the prepare ended without a part
    Participant* table_;
    std::string tx_;
  };

  // `self`: this node's id, for messages. Everything must outlive this object.
  Participant(Store& store, Membership& members, SaveService& saves, std::string self)
      : store_(store), members_(members), saves_(saves), self_(std::move(self)) {}

  // Called after each commit here that replaced a step's version with a new one (not a
  // removal), with the version replaced: the peer service holds it a while for the nodes still
  // behind (daemon/cluster/read_leases.h). Set before the first change comes, or cleared.
  void on_replaced(std::function<void(std::shared_ptr<const StepVersion>)> f) { replaced_ = std::move(f); }

  // Phase one starts: kAlreadyExists when `tx` is preparing or prepared here already,
  // kFailedPrecondition when its coordinator aborted it already.
  Result<Preparing> begin(const std::string& tx);
  // Phase one ends with this node's part: kept for a restart when `by` has a lease and the
  // change can be kept, then held until it is decided. When its record came meanwhile it is
  // committed at once (ok); when its coordinator aborted it meanwhile it is dropped
  // (kFailedPrecondition). `save`: the save whose part it is.
  Status prepared(Preparing preparing, PreparedChange change, const Decider& by,
                  std::optional<SavePart> save = std::nullopt);
  // Holds a part this node prepared itself (the home node of a dataset add: its peers pull the
  // sample table from it before anyone commits), decided by the record `key`.
  void hold(const std::string& tx, PreparedChange change, const std::string& key);

  // Phase two: commits (or aborts) `tx`. A second commit waits for the first's outcome; a
  // commit of one committed already is ok; of one unknown, kNotFound. An abort of one unknown
  // or preparing is remembered (its prepare then drops its part); `why`: why the coordinator
  // aborted, which trying again would not undo (a save's part then fails instead of waiting).
  Status finish(const std::string& tx, bool commit, const std::string& why = {});
  // The record of `tx` was seen in etcd (its commit): commits it when held here, or waits for
  // its commit under way; whether `tx` is committed here. Otherwise it is remembered, and a
  // prepare that ends later commits at once.
  bool commit_decided(const std::string& tx);
  // A record of `key` written by transaction `tx` at `version` (0: none; `removed`: the step
  // was removed): a part held here for the same key under another transaction can never commit
  // any more (the record moved past what it was prepared against) and is aborted. `tx` empty:
  // the other nodes are at `version` (a dataset's catch-up), and a part held here to make a
  // version no newer, held at least `held` (its commit is not on its way any more), is aborted.
  void drop_superseded(const std::string& key, const std::string& tx, uint64_t version, bool removed,
                       std::chrono::seconds held = std::chrono::seconds(0));
  // On start, before the records are read: the parts kept when this node stopped wait again for
  // their decision under the lease they were prepared for. Without etcd nothing decides them:
  // aborted.
  void restore();
  // Drops held parts whose coordinator's lease ended (committing instead those whose record
  // carries their transaction) and any older than `max_age`. How many were dropped.
  size_t expire(std::chrono::seconds max_age);

  // A prepare of `key` (or, `datasets`, of job `job`'s datasets) refused with `why`: when a
  // part held here under another transaction blocks it, `why` names its coordinator, who ends it.
  Status blocked(Status why, const std::string& tx, const std::string& key, const std::string& job,
                 bool datasets) const;
  // The dataset version a dataset add held under `tx` makes; null when none is held.
  std::shared_ptr<const DatasetVersion> dataset_added(const std::string& tx) const;
  TxState state(const std::string& tx) const;
  size_t prepared_count() const;
  const std::string& self() const { return self_; }

 private:
  struct Held {
    PreparedChange change;
    Decider by;
    std::optional<SavePart> save;
    std::chrono::steady_clock::time_point since;
    bool kept = false;  // its record is in the metadata until it is decided
  };
  // Undoes an aborted part: its blobs, its kept record, its save's part.
  void drop(const std::string& tx, Held& held, const std::string& why = {});
  TxState state_locked(const std::string& tx) const;  // mu_ held
  static void remember(std::deque<std::string>& memory, const std::string& tx);
  static bool in(const std::deque<std::string>& memory, const std::string& tx);

  Store& store_;
  Membership& members_;
  SaveService& saves_;
  const std::string self_;
  std::function<void(std::shared_ptr<const StepVersion>)> replaced_;

  mutable std::mutex mu_;             // guards everything below
  std::set<std::string> preparing_;   // phase one under way
  std::map<std::string, Held> held_;  // prepared, by transaction id
  // Commits under way (a transaction leaves held_ when its commit starts): a second commit of
  // one (the coordinator's peer.commit and the record seen in etcd race) waits for the first's
  // outcome, so that no node answers "committed" before it serves the new version.
  std::map<std::string, std::shared_future<Status>> committing_;
  std::deque<std::string> committed_;  // the last transactions committed
  std::deque<std::string> aborted_;    // the last transactions aborted, prepared here or not
  // The last transactions whose record was seen in etcd while this node did not hold them.
  std::deque<std::string> recorded_;
};

}  // namespace ptcfs
