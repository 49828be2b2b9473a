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
#include "daemon/cluster/peer_client.h"
#include "daemon/cluster/participant.h"
#include "daemon/cluster/two_phase.h"
#include "daemon/store/store.h"
#include "transport/rpc.h"

namespace ptcfs {

class Coordinator final : public ChangeRunner {
 public:
  // Everything must outlive this object; `peers` asks the nodes (this node in process);
  // `members` says who takes part and decides each commit (static, or etcd).
  Coordinator(Store& store, PeerClient& peers, Participant& local, Membership& members)
      : store_(store),
        peers_(peers),
        local_(local),
        members_(members),
        two_phase_(peers, members, peers.self(), peers.name_of(peers.self())) {}

  std::shared_ptr<const ptc::ClusterConfig> cluster() const { return peers_.cluster(); }
  std::string id() const { return name_of(peers_.self()); }

  // ChangeRunner. `import` refuses --format hf (it imports into a single daemon).
  Result<ImportResult> import(const ImportRequest& req, const PhaseProgress& progress) override;
  Result<RepartitionResult> repartition(const RepartitionRequest& req, const PhaseProgress& progress) override;
  // Every node removes it, or (one does not answer, or refuses) none does.
  Status remove(const RemoveRequest& req) override;
  // This node is the home of the files it adds (daemon/cluster/coordinator_datasets.cc).
  Result<DatasetAddResult> dataset_add(const DatasetAddRequest& req, const PhaseProgress& progress) override;
  Result<std::shared_ptr<const DatasetVersion>> dataset_progress(const DatasetProgressRequest& req) override;
  // A save into the mounts (daemon/cluster/coordinator_saves.cc). The first member decides
  // saves (so two nodes finishing at once never race): on it, this asks every node for its
  // part, and when all are reachable, agree on ptc.json, have no file open or wrong, and
  // their complete shards cover the layout, commits the step on every node in two phases
  // (replicas of a shard written on several nodes must have the same bytes); on any other
  // node it passes the word to the first (peer.save_ready). Not yet decidable (a node
  // unreachable, a part missing): ok, and the word comes again (every part says it every 5 s).
  Status save_commit(const SaveCommitRequest& req) override;
  // The members, whether each answers, their byte counters, and how membership works.
  RunnerStatus status() override;

  // Every second: changes whose decision etcd did not answer are settled once it answers
  // (committed if etcd recorded them, else fenced over and aborted; their keys' locks are
  // freed), and, every 5 s, each abort a node missed is sent again until it answers.
  // Returns how many aborts are still owed.
  size_t settle() { return two_phase_.settle(); }

 private:
  std::string name_of(int node) const { return peers_.name_of(node); }
  std::vector<std::string> placement_or_all(const std::vector<std::string>& nodes) const;
  // Who of the members is up, for a repartition of `c` from version `version`: fills c.down;
  // an error when a node is at another version or the new placement needs a down node.
  Result<std::vector<int>> nodes_up(RepartitionChange& c, uint64_t version);
  void commit_save(const std::string& job, const std::string& step);

  Store& store_;
  PeerClient& peers_;
  Participant& local_;  // this node's parts (its own part of a dataset add)
  Membership& members_;
  TwoPhase two_phase_;
  std::mutex save_mu_;  // one save commit at a time
};

}  // namespace ptcfs
