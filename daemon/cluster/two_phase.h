// A change across the cluster in two phases (docs/ARCHITECTURE.md "Reliability rules"), written
// once: every node that takes part prepares its part; when all are ready, the change is decided
// (one etcd transaction that checks the record it was prepared against and this node's lease,
// or in static mode the coordinator alone) and every node commits; any failure aborts it on
// every node, and every node keeps the old version, complete.
//
// TwoPhase owns the decision and what it leaves owed: the record's lock while a change runs,
// aborts a node missed (sent again until it answers) and changes whose decision etcd did not
// answer (settled once it answers: committed where the record carries their transaction, else
// fenced over and aborted). Each kind of change (daemon/cluster/coordinator.h) supplies only
// what differs: who prepares, the prepare request, a check across the replies, the record.
//
// Thread-safety: every method may be called from any thread; changes of one key are
// serialized by its lock (a second one is refused naming the holder). Errors are Status
// values naming the change, the node and the key at fault; nothing throws.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "daemon/cluster/changes/change_kinds.h"
#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/membership.h"
#include "ptc/base/status.h"

namespace ptcfs {

// The nodes' side of a change, as TwoPhase sees it (PeerClient, daemon/cluster/peer_client.h;
// a scripted one in tests). Answers come in the order of `nodes`.
class ChangePeers {
 public:
  virtual ~ChangePeers() = default;
  virtual std::vector<Result<PrepareReply>> prepare(const std::vector<int>& nodes, const PrepareRequest& req) = 0;
  virtual std::vector<Status> finish(const std::vector<int>& nodes, const FinishRequest& req) = 0;
  // The id of node `node`, for messages.
  virtual std::string name_of(int node) const = 0;
};

// A record decided by a change: a step's or a dataset's (daemon/cluster/etcd_record.h).
using ChangeRecord = std::variant<StepRecord, DatasetRecord>;
// A step's record of `kind` at `version` placed on `nodes` (with their `gpus`).
StepRecord step_record(std::string kind, uint64_t version, std::vector<std::string> nodes = {},
                       std::vector<int> gpus = {});
// A dataset's record of `kind` at `version`.
DatasetRecord dataset_record(std::string kind, uint64_t version);

// One change: what TwoPhase::run needs of its kind, built with designated initializers
// (`.what = ..., .nodes = ..., .request = ..., .record = ...`); the others have defaults.
struct ChangeSpec {
  std::string what;        // "import of j/1": the start of every message about it
  std::vector<int> nodes;  // who takes part, in order (commits and aborts go to them all)
  std::set<int> held{};    // those of `nodes` that hold their part prepared already (not asked)
  // kAll: every node must prepare. kReachable: a node other than this one that cannot be
  // reached is left out (it catches up later); any other failure aborts.
  enum class Quorum { kAll, kReachable } quorum = Quorum::kAll;
  PrepareRequest request;  // its tx, coordinator and lease are TwoPhase::request's
  // Across the replies of the nodes asked (in order), when all prepared: ok, or why the
  // change must be aborted (their ptc.json differ, ...).
  std::function<Status(const std::vector<int>& nodes, const std::vector<PrepareReply>& replies)> check{};
  ChangeRecord record;  // what decides it (its tx and coordinator are filled in)
  // Added to a failed prepare's error ("" none), as "<refused>: <error>".
  std::string refused{};
  // Called with ("prepare", 0, nodes) before preparing and ("commit", 0, nodes) before deciding.
  std::function<void(const char* phase, uint64_t done, uint64_t total)> progress{};
};

class TwoPhase {
 public:
  // `self`: this node's index and id (it coordinates). `abort_retry`: the least time between
  // two rounds of sending missed aborts again (settle()). Both references must outlive this.
  TwoPhase(ChangePeers& peers, Membership& members, int self, std::string self_id,
           std::chrono::milliseconds abort_retry = std::chrono::seconds(5))
      : peers_(peers), members_(members), self_(self), self_id_(std::move(self_id)), abort_retry_(abort_retry) {}

  // The record of a key, read under the key's lock, held until this object goes (or, when etcd
  // does not answer a decision, until the change is settled).
  class Locked {
   public:
    Locked(Locked&& o) noexcept
        : key_(std::move(o.key_)),
          prior_(std::move(o.prior_)),
          record_(std::move(o.record_)),
          members_(std::exchange(o.members_, nullptr)) {}
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;
    ~Locked() {
      if (members_) members_->unlock(key_);
    }
    const std::string& key() const { return key_; }
    // The record as read: revision 0 when there is none.
    int64_t revision() const { return prior_.revision; }
    // Decoded; none when there is no record.
    const std::optional<KeyedRecord>& record() const { return record_; }
    bool held() const { return members_ != nullptr; }

   private:
    friend class TwoPhase;
    Locked(Membership& m, std::string key) : key_(std::move(key)), members_(&m) {}
    std::string key_;
    Record prior_;
    std::optional<KeyedRecord> record_;
    Membership* members_;
  };

  // Checks that this node may take part in changes, settles owed decisions of `key`, takes
  // its lock (refused naming the holder when another change holds it) and reads its record
  // (refused naming the key and the member at fault when it does not decode).
  Result<Locked> lock(const std::string& key);

  // A prepare request for `change` under a fresh transaction, coordinated by this node.
  PrepareRequest request(decltype(PrepareRequest::change) change) const;

  // What the nodes asked answered, when every one of them prepared.
  struct Prepared {
    std::vector<int> nodes;  // asked and prepared, in order (kReachable: the reachable ones)
    std::vector<PrepareReply> replies;
  };
  // Prepares `spec` on its nodes against `prior` (the lock of the record's key), checks the
  // replies, decides and commits. A failed prepare or check aborts everywhere and returns the
  // error; a lost decision (another change of the key committed first, or this node's lease
  // ended) aborts everywhere; an unanswered one leaves the change undecided (settle()) and
  // keeps the key locked until then.
  Result<Prepared> run(Locked& prior, ChangeSpec spec);

  // Periodic (every second): settles the changes whose decision etcd did not answer, once it
  // answers, freeing their keys' locks; and, at most every `abort_retry`, sends each missed
  // abort again. Returns how many aborts are still owed.
  size_t settle();
  // Settles the undecided changes only (a new change of a key calls it first).
  void settle_undecided();
  // Sends every missed abort again now; how many are still owed.
  size_t retry_aborts();

  // For tests and status: changes whose decision is not known, and aborts owed.
  size_t undecided() const;
  size_t unaborted() const;

 private:
  struct Undecided {
    std::vector<int> nodes;
    std::string tx, key;
    Record prior;
    std::string what;
  };
  // Commits (or aborts) `tx` on `nodes`; the first error. A missed abort is owed. `why`: an
  // abort that trying again would not undo (FinishRequest::why).
  Status finish_all(const std::vector<int>& nodes, const std::string& tx, bool commit, const std::string& why = {});
  // `lease`: the one the prepare carried (PrepareRequest::lease).
  Status decide(const std::vector<int>& nodes, const std::string& tx, int64_t lease, Locked& prior, ChangeRecord record,
                const std::string& what);
  // Asks the nodes of `spec` to prepare; `taking_part` gets who commits or aborts it. `checked`:
  // the failure is the spec's check refusing what every node prepared.
  Status prepare_all(const ChangeSpec& spec, Prepared& out, std::vector<int>& taking_part, bool& checked);

  ChangePeers& peers_;
  Membership& members_;
  const int self_;
  const std::string self_id_;
  const std::chrono::milliseconds abort_retry_;
  mutable std::mutex mu_;                               // guards the three below
  std::vector<std::pair<int, std::string>> unaborted_;  // (node, transaction)
  std::vector<Undecided> undecided_;
  std::chrono::steady_clock::time_point last_retry_{};
};

}  // namespace ptcfs
