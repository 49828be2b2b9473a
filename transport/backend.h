// The peer transport behind one interface: how a node sends requests to the other nodes of
// its cluster and pulls bytes from them. Callers (daemon/) see only this interface; TCP is
// the backend built today (make_tcp_backend). An NCCL backend (GPU-direct, when CUDA and
// NCCL are found) would implement call_data for the bulk bytes beside it, and
// CMake would add it only where they are found, without touching a caller.
//
// Thread-safety: every method may be called from any thread; calls to one node run in
// parallel.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ptc/cluster.h"
#include "transport/rpc.h"

namespace ptcfs::transport {

class PeerBackend {
 public:
  virtual ~PeerBackend() = default;
  // The nodes this backend knows, as a snapshot. The table only grows: a node's index
  // stays valid (and names the same id) for the backend's life, whatever joins later.
  virtual std::shared_ptr<const ptc::ClusterConfig> cluster() const = 0;
  // Adds a node that joined (or updates the address of a known id, dropping its idle
  // connections); its index.
  virtual int add_node(const ptc::NodeSpec& node) = 0;
  // A request to node `node` (an index into cluster()->nodes); errors name the node.
  virtual Result<nlohmann::json> call(int node, const nlohmann::json& request, const ProgressSink& progress = {}) = 0;
  // A request answered with bytes (into out, at most max_bytes), counted in bytes_received.
  virtual Result<nlohmann::json> call_data(int node, const nlohmann::json& request, std::string& out,
                                           uint64_t max_bytes) = 0;
  // A request answered with exactly `len` bytes, placed by `hooks` (RpcClient::call_into);
  // counted in bytes_received.
  virtual Result<nlohmann::json> call_into(int node, const nlohmann::json& request, uint64_t len,
                                           const IntoHooks& hooks) = 0;
  virtual uint64_t bytes_received() const = 0;
};

// Every peer call has deadlines (transport/rpc.h Deadlines): a peer that stops answering
// fails the call with kDeadlineExceeded naming the node, within `idle` of its last frame.
struct PeerDeadlines {
  std::chrono::milliseconds connect{5000};  // connect and authenticate
  std::chrono::milliseconds idle{10000};    // silence while waiting (servers send keepalives every second)
  std::chrono::milliseconds call{0};        // a whole call(): 0, none (a prepare may run long; idle bounds it)
  std::chrono::milliseconds data{60000};    // a whole call_data(): one chunk of bytes
};

// TCP: connections authenticated with the cluster secret and reused. A call takes an idle
// connection to the node (or opens one) and gives it back when the call succeeds or fails
// with the peer's own error reply; a connection that broke is dropped, and a reused one
// that turns out closed is retried once on a new connection.
std::unique_ptr<PeerBackend> make_tcp_backend(ptc::ClusterConfig cluster, std::string secret,
                                              PeerDeadlines deadlines = {});

}  // namespace ptcfs::transport
