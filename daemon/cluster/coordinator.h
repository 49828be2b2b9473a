// The coordinator: the node the CLI talks to runs a change across the cluster in two phases
// (docs/ARCHITECTURE.md "Reliability rules"). It asks every node for its state, computes one plan, has
// every live node prepare its part at once (peer.prepare, daemon/cluster/peer_service.h;
// its own part directly, without the network), and only when all are ready tells them all
// to commit; any failure aborts everywhere, and every node keeps the old version, complete.
// Every peer call has the backend's deadlines, so a stopped peer fails a change rather
// than hanging it.
//
// Thread-safety: methods may be called concurrently; the store serializes changes of one
// step (a second repartition of a step under change is refused by its nodes).
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/change/runner.h"
#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/peer_service.h"
#include "daemon/dataset/dataset_ops.h"
#include "daemon/reshard/repartition.h"
#include "daemon/store/store.h"
#include "transport/backend.h"

namespace ptcfs {

class Coordinator final : public ChangeRunner {
 public:
  // Everything must outlive this object; `local` serves this node's own part; `members`
  // says who takes part and decides each commit (static, or etcd: daemon/cluster/membership.h).
  Coordinator(Store& store, transport::PeerBackend& peers, int self, PeerService& local, Membership& members)
      : store_(store), peers_(peers), self_(self), local_(local), members_(members) {}

  std::shared_ptr<const ptc::ClusterConfig> cluster() const { return peers_.cluster(); }
  std::string id() const;

  // The ChangeRunner (daemon/change/runner.h). `nodes` of a request: the node ids to place ranks
  // on (empty: every member, in the membership's order).
  ptc::Result<ImportResult> import(const ImportRequest& req, const PhaseProgress& progress) override;
  ptc::Result<RepartitionResult> repartition(const RepartitionRequest& req, const PhaseProgress& progress) override;
  // Datasets (daemon/cluster/coordinator_datasets.cc): this node is the home of the files it adds.
  ptc::Result<DatasetAddResult> dataset_add(const DatasetAddRequest& req, const PhaseProgress& progress) override;
  ptc::Result<std::shared_ptr<const DatasetVersion>> dataset_progress(const DatasetProgressRequest& req) override;
  // `ptcfs rm` of a committed step: every node removes it, or (one does not answer, or refuses)
  // none does.
  ptc::Status remove(const RemoveRequest& req) override;
  // Members, their reachability and byte counters, and how membership works.
  RunnerStatus status() override;
  // After a restart: a step that peers moved to a newer version while this node was down
  // (a repartition cannot place shards on a down node) is brought to that version, holding
  // no shard; its old blobs are then collected. Datasets whose position moved take the
  // newest one. Returns how many steps and datasets were caught up.
  size_t catch_up();
  // A record written in etcd (EtcdMembership's watch; on start, every record): commits the
  // change it decides if this node prepared it; otherwise brings the step to the recorded
  // version (holding none of it) or removes it.
  void on_record(const KeyedRecord& record);
  // A node that missed an abort (it stopped answering in the middle of a change) still
  // holds its prepared part, and its step stays marked as changing. Aborts are idempotent:
  // each missed one is sent again by this call (the node calls it every few seconds) until
  // the node answers. Changes whose decision etcd did not answer are settled here too once
  // it answers (committed if etcd recorded them, else aborted). Returns how many aborts are
  // still owed.
  size_t retry_aborts();
  // Settles the changes whose decision etcd did not answer, once it answers: committed where
  // the record carries their transaction, else fenced off and aborted; frees their keys' locks.
  // The node calls it every second; a new change of such a key calls it first.
  void settle_undecided();

  // Saves into the mounts (daemon/cluster/coordinator_saves.cc). A node whose part of a
  // pending step is complete calls save_commit; the first node of cluster.json commits saves
  // (so two nodes finishing at once never race), others pass the word to it. It asks every
  // node for its part, and when all are reachable, agree on ptc.json, have no file open or
  // wrong, and their complete shards cover the layout, commits the step on every node in two
  // phases; replicas of a shard written on several nodes must have the same bytes. Every node
  // says save_commit again every 5 s for its parts still waiting (daemon/node.cc): a step that could
  // not be decided (a node unreachable, the deciding node down) is looked at again then.
  ptc::Status save_commit(const SaveCommitRequest& req) override;

 private:
  // Sends `request(node)` to every node in `nodes` at once (this node's own answer comes
  // from the local peer service); answers in the same order.
  std::vector<ptc::Result<nlohmann::json>> ask_all(const std::vector<int>& nodes,
                                                   const std::function<nlohmann::json(int)>& request);
  // Commits (or aborts) transaction `tx` on every node of `nodes`; the first error.
  ptc::Status finish_all(const std::vector<int>& nodes, const std::string& tx, bool commit);
  // Decides transaction `tx`, prepared on `nodes` against `prior` (the record of `key` read
  // before preparing), and commits it on them; when the decision is lost (another change of
  // the key committed first, or this node's lease ended), aborts it on them. In etcd mode a
  // node that misses the commit message switches when it sees the record.
  // When etcd does not answer, the outcome is left undecided (settle_undecided) and the
  // key's lock is taken from `prior`: it stays until the change is settled.
  struct Locked;
  ptc::Status decide(const std::vector<int>& nodes, const std::string& tx, const std::string& key, Locked& prior,
                     nlohmann::json record, const std::string& what);
  // The record of `key` read under its lock (held until this object goes), after checking
  // that this node may take part in changes.
  struct Locked : Record {
    Locked(Membership& m, std::string k) : members(&m), key(std::move(k)) {}
    Locked(Locked&& o) noexcept : Record(std::move(o)), members(std::exchange(o.members, nullptr)), key(std::move(o.key)) {}
    Locked(const Locked&) = delete;
    ~Locked() {
      if (members) members->unlock(key);
    }
    Membership* members;
    std::string key;
  };
  ptc::Result<Locked> record_before_change(const std::string& key);
  PrepareRequest request(const std::string& tx, decltype(PrepareRequest::change) change) const;
  std::string name_of(int node) const { return node_id(*cluster(), node); }
  std::vector<int> others() const;
  std::vector<std::string> placement_or_all(const std::vector<std::string>& nodes) const;
  size_t catch_up_datasets();
  // Brings job/step to the newest version its peers have (at least `at_least`), holding none
  // of it; whether it moved.
  bool catch_up_step(const std::string& job, const std::string& step, uint64_t at_least);
  void commit_save(const std::string& job, const std::string& step);

  Store& store_;
  transport::PeerBackend& peers_;
  int self_;
  PeerService& local_;
  Membership& members_;
  // A change whose decision etcd did not answer: settled when it answers again.
  struct Undecided {
    std::vector<int> nodes;
    std::string tx, key;
    Record prior;
    std::string what;
  };
  std::mutex mu_;                                     // guards unaborted_, undecided_
  std::vector<std::pair<int, std::string>> unaborted_;  // (node, transaction)
  std::vector<Undecided> undecided_;
  std::mutex save_mu_;                                  // one save commit at a time
};

}  // namespace ptcfs
