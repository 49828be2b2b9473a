// Connections from this node to the other nodes of its cluster, authenticated with the
// cluster secret and reused: a call takes an idle connection to the node (or opens one)
// and gives it back when the call succeeds or fails with the peer's own error reply; a
// connection that broke (kUnavailable, kCorrupt) is dropped.
//
// Thread-safety: every method may be called from any thread; calls to one node run in
// parallel on separate connections.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/cluster.h"
#include "transport/rpc.h"

namespace ptcfs {

class PeerPool {
 public:
  PeerPool(ptc::ClusterConfig cluster, std::string secret);
  const ptc::ClusterConfig& cluster() const { return cluster_; }

  // A request to node `node` (an index into cluster().nodes); errors name the node.
  ptc::Result<nlohmann::json> call(int node, const nlohmann::json& request,
                                   const transport::ProgressSink& progress = {});
  // A request answered with bytes (into out, at most max_bytes), counted in bytes_received.
  ptc::Result<nlohmann::json> call_data(int node, const nlohmann::json& request, std::string& out,
                                        uint64_t max_bytes);
  uint64_t bytes_received() const { return received_.load(); }

 private:
  template <class Fn>
  ptc::Result<nlohmann::json> with_client(int node, Fn&& fn);

  ptc::ClusterConfig cluster_;
  std::string secret_;
  std::mutex mu_;
  std::vector<std::vector<std::unique_ptr<transport::RpcClient>>> idle_;  // per node
  std::atomic<uint64_t> received_{0};
};

}  // namespace ptcfs
