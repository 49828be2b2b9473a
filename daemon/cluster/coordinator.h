// The coordinator: the node the CLI talks to runs a change across the cluster in two phases
// (docs/ARCHITECTURE.md "Reliability rules"), as the ChangeRunner of a node in a cluster
// (daemon/change/runner.h). Each change plans here what it needs (who prepares, the prepare
// request, the check across replies, the record that decides it) and hands it to TwoPhase
// (daemon/cluster/two_phase.h), which prepares, decides, commits or aborts, and owns what is
// owed when a node or etcd does not answer. Peer calls go through PeerClient
// (daemon/cluster/peer_client.h), with the backend's deadlines, so a stopped peer fails a
// change rather than hanging it.
//
// Thread-safety: methods may be called concurrently; a second change of a step or dataset
// under change is refused (its key's lock, or its nodes' claims).
#pragma once

#include <atomic>
#include <functional>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/change/runner.h"
#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/record_ledger.h"
#include "daemon/cluster/peer_client.h"
#include "daemon/cluster/peer_service.h"
#include "daemon/cluster/two_phase.h"
#include "daemon/store/store.h"
#include "transport/rpc.h"

namespace ptcfs {

class Coordinator final : public ChangeRunner {
 public:
  // Everything must outlive this object; `peers` asks the nodes (this node in process);
  // `members` says who takes part and decides each commit (static, or etcd).
  Coordinator(Store& store, PeerClient& peers, PeerService& local, Membership& members)
      : store_(store),
        peers_(peers),
        local_(local),
        members_(members),
        two_phase_(peers, members, peers.self(), peers.name_of(peers.self())) {}

  std::shared_ptr<const ptc::ClusterConfig> cluster() const { return peers_.cluster(); }
  std::string id() const { return name_of(peers_.self()); }

  // ChangeRunner. `import` refuses --format hf (it imports into a single daemon).
  ptc::Result<ImportResult> import(const ImportRequest& req, const PhaseProgress& progress) override;
  ptc::Result<RepartitionResult> repartition(const RepartitionRequest& req, const PhaseProgress& progress) override;
  // Every node removes it, or (one does not answer, or refuses) none does.
  ptc::Status remove(const RemoveRequest& req) override;
  // This node is the home of the files it adds (daemon/cluster/coordinator_datasets.cc).
  ptc::Result<DatasetAddResult> dataset_add(const DatasetAddRequest& req, const PhaseProgress& progress) override;
  ptc::Result<std::shared_ptr<const DatasetVersion>> dataset_progress(const DatasetProgressRequest& req) override;
  // A save into the mounts (daemon/cluster/coordinator_saves.cc). The first member decides
  // saves (so two nodes finishing at once never race): on it, this asks every node for its
  // part, and when all are reachable, agree on ptc.json, have no file open or wrong, and
  // their complete shards cover the layout, commits the step on every node in two phases
  // (replicas of a shard written on several nodes must have the same bytes); on any other
  // node it passes the word to the first (peer.save_ready). Not yet decidable (a node
  // unreachable, a part missing): ok, and the word comes again (every part says it every 5 s).
  ptc::Status save_commit(const SaveCommitRequest& req) override;
  // The members, whether each answers, their byte counters, and how membership works.
  RunnerStatus status() override;

  // Periodic work of a node in a cluster (the daemon's ticker).
  //
  // After a restart, and every 10 s on a static cluster: a step that peers moved to a newer
  // version while this node was down or unreachable (a repartition cannot place shards on a
  // down node) is brought to that version, holding no shard; its old blobs are then collected.
  // Datasets whose position moved take the newest one. Returns how many steps and datasets
  // were caught up.
  // `stopping` (may be empty) ends it early, between one step or dataset and the next.
  size_t catch_up(const std::function<bool()>& stopping = {});
  // The datasets alone, as catch_up takes them.
  size_t catch_up_datasets(const std::function<bool()>& stopping = {});
  // With etcd: a record showed that this node missed a change of a dataset (a dataset's record
  // newer than its version, or the record of a step it was behind on, of a job with datasets).
  // on_record does not catch up itself (the watch thread would wait on peers): it calls `wake`
  // and counts a few tries down; catch_up_if_behind, on the node's catch-up ticker, makes one
  // (the others may commit just after their record appears). Whether one was made.
  void on_behind(std::function<void()> wake) { wake_ = std::move(wake); }
  bool catch_up_if_behind(const std::function<bool()>& stopping = {});
  // A record written in etcd (EtcdMembership's watch; on start, every record): commits the
  // change it decides if this node prepared it; otherwise brings the step to the recorded
  // version (holding none of it) or removes it.
  void on_record(const KeyedRecord& record);
  // With etcd, after a restart: brings this node to every record the watch delivered (on start,
  // every one there is) that it is behind on (a step at an older version or missing, a step
  // removed, a dataset's older position); what it is still behind on. The node serves its mount
  // once this is empty (docs/ARCHITECTURE.md "What holds under faults").
  std::vector<RecordMark> catch_up_records(const std::function<bool()>& stopping = {});
  // Every second: changes whose decision etcd did not answer are settled once it answers
  // (committed if etcd recorded them, else fenced over and aborted; their keys' locks are
  // freed), and, every 5 s, each abort a node missed is sent again until it answers.
  // Returns how many aborts are still owed.
  size_t settle() { return two_phase_.settle(); }

 private:
  std::string name_of(int node) const { return peers_.name_of(node); }
  std::vector<int> others() const;
  std::vector<std::string> placement_or_all(const std::vector<std::string>& nodes) const;
  // Who of the members is up, for a repartition of `c` from version `version`: fills c.down;
  // an error when a node is at another version or the new placement needs a down node.
  ptc::Result<std::vector<int>> nodes_up(RepartitionChange& c, uint64_t version);
  // Brings job/step to the newest version its peers have (at least `at_least`), holding none
  // of it; whether it moved.
  bool catch_up_step(const std::string& job, const std::string& step, uint64_t at_least);
  void commit_save(const std::string& job, const std::string& step);

  void behind();  // a missed dataset change: tries counted afresh, the ticker woken
  void remove_recorded(const std::string& job, const std::string& step);  // etcd records it removed

  Store& store_;
  PeerClient& peers_;
  PeerService& local_;
  std::function<void()> wake_;
  std::atomic<int> behind_tries_{0};
  RecordLedger ledger_;  // the newest record of each key the watch delivered
  Membership& members_;
  TwoPhase two_phase_;
  std::mutex save_mu_;  // one save commit at a time
};

}  // namespace ptcfs
