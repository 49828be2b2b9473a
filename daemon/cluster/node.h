// This node's part in a cluster (DESIGN.md "Placement", "Reliability rules"):
//
// - it reads the slices of shards other nodes hold, for the mount (RemoteSlices);
// - it answers its peers: peer.read (daemon/cluster/slab_read.h), peer.state, peer.stats, and the
//   two phases of a change: peer.prepare (import or repartition), peer.commit, peer.abort;
// - it reads dataset samples whose files another node holds, and serves its own
//   (daemon/cluster/datasets.cc);
// - the node the CLI talks to coordinates imports and repartitions: it asks every node for
//   its state, computes one plan, has every live node prepare its part in parallel, and
//   only when all are ready tells them all to commit; any failure aborts everywhere, and
//   every node keeps the old version, complete.
//
// Peer ops are accepted from any authenticated connection: holding the cluster secret is
// what makes a peer.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/cluster/prepare.h"
#include "daemon/dataset/dataset_ops.h"
#include "transport/backend.h"
#include "daemon/store/prepared.h"
#include "daemon/reshard/repartition.h"
#include "daemon/store/store.h"
#include "transport/rpc.h"

namespace ptcfs {

// A fresh random transaction id (16 hex digits).
std::string new_transaction_id();

class ClusterNode final : public RemoteSlices, public RemoteSamples {
 public:
  ClusterNode(ptc::ClusterConfig cluster, int self, std::string secret);
  // Before serving: the node's store (created with this object as its RemoteSlices).
  void attach(Store& store, PrepareOptions options);

  const ptc::ClusterConfig& cluster() const { return peers_->cluster(); }
  const std::string& id() const { return cluster().nodes[static_cast<size_t>(self_)].id; }

  ptc::Status read(const StepVersion& v, const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
                   fs::ReadBuffer& out) const override;

  // RemoteSamples (daemon/cluster/datasets.cc).
  const std::string& self_id() const override;
  ptc::Status read_samples(const DatasetVersion& v, const std::vector<fs::DatasetContent::Piece>& pieces,
                           fs::ReadBuffer& out) const override;

  // Ops named "peer.*".
  ptc::Result<transport::Reply> handle_peer(const nlohmann::json& request);

  // Coordinator side. `nodes`: the node ids to place ranks on (empty: all, in cluster.json
  // order).
  ptc::Result<nlohmann::json> import(const std::string& dir, const std::string& job, const std::string& step,
                                     const std::vector<std::string>& nodes, const transport::ProgressSink& progress);
  ptc::Result<RepartitionResult> repartition(const RepartitionRequest& req, const std::vector<std::string>& nodes,
                                             const transport::ProgressSink& progress);
  // Datasets (daemon/cluster/datasets.cc): this node is the home of the files it adds.
  ptc::Result<nlohmann::json> dataset_add(const DatasetAddRequest& req, int dp, const IndexProgress& progress);
  ptc::Result<nlohmann::json> dataset_progress(const std::string& job, const std::string& name,
                                               std::optional<uint64_t> epoch, uint64_t consumed);
  // Per node: reachable, bytes_sent, bytes_received.
  nlohmann::json nodes_status();
  // After a restart: a step that peers moved to a newer version while this node was down
  // (a repartition cannot place shards on a down node) is brought to that version, holding
  // no shard; its old blobs are then collected. Returns how many steps were caught up.
  size_t catch_up();

 private:
  struct Answer {
    ptc::Result<nlohmann::json> result = ptc::internal("not asked");
  };
  // Sends `request(node)` to every node in `nodes` at once (this node's own answer comes from
  // handle_peer directly); answers in the same order.
  std::vector<Answer> ask_all(const std::vector<int>& nodes, const std::function<nlohmann::json(int)>& request);
  ptc::Result<nlohmann::json> prepare(const nlohmann::json& req);
  ptc::Result<nlohmann::json> finish(const nlohmann::json& req, bool commit);
  ptc::Result<nlohmann::json> state(const nlohmann::json& req) const;
  // Commits (or aborts) transaction `tx` on every node of `nodes`; the first error.
  ptc::Status finish_all(const std::vector<int>& nodes, const std::string& tx, bool commit);
  std::vector<std::string> placement_or_all(const std::vector<std::string>& nodes) const;
  // Every node's index, and every other node's, in cluster.json order.
  std::vector<int> all_nodes() const;
  std::vector<int> other_nodes() const;
  ptc::Result<transport::Reply> serve_samples(const nlohmann::json& req);
  ptc::Result<transport::Reply> serve_table(const nlohmann::json& req);
  ptc::Result<nlohmann::json> dataset_state(const nlohmann::json& req) const;
  ptc::Result<PreparedChange> prepare_dataset_part(const nlohmann::json& req);
  // Datasets whose position peers moved while this node was down take the newest one.
  size_t catch_up_datasets();

  std::unique_ptr<transport::PeerBackend> peers_;
  int self_;
  Store* store_ = nullptr;
  PrepareOptions options_;
  std::atomic<uint64_t> sent_{0};
  mutable std::atomic<uint64_t> remote_reads_{0};
  std::mutex mu_;
  std::map<std::string, PreparedChange> prepared_;  // by transaction id
};

}  // namespace ptcfs
