#include "daemon/peers.h"

namespace ptcfs {

using nlohmann::json;

namespace {
constexpr size_t kMaxIdlePerNode = 16;
}  // namespace

PeerPool::PeerPool(ptc::ClusterConfig cluster, std::string secret)
    : cluster_(std::move(cluster)), secret_(std::move(secret)), idle_(cluster_.nodes.size()) {}

template <class Fn>
ptc::Result<json> PeerPool::with_client(int node, Fn&& fn) {
  if (node < 0 || static_cast<size_t>(node) >= cluster_.nodes.size()) return ptc::internal("no node " + std::to_string(node));
  const auto& spec = cluster_.nodes[static_cast<size_t>(node)];
  // An idle connection may have been closed by the peer meanwhile (it restarted, or its
  // idle timer ran out): such a failure is retried once on a new connection.
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<transport::RpcClient> client;
    if (attempt == 0) {
      std::lock_guard lock(mu_);
      auto& idle = idle_[static_cast<size_t>(node)];
      if (!idle.empty()) {
        client = std::move(idle.back());
        idle.pop_back();
      }
    }
    const bool reused = client != nullptr;
    if (!client) {
      auto c = transport::RpcClient::connect(spec.addr, secret_);
      if (!c) return c.status().with_context("node " + spec.id);
      client = std::move(c).value();
    }
    ptc::Result<json> r = fn(*client);
    const bool broken = !r && (r.status().code() == ptc::Code::kUnavailable || r.status().code() == ptc::Code::kCorrupt);
    if (broken && reused && r.status().code() == ptc::Code::kUnavailable) continue;
    if (!broken) {
      std::lock_guard lock(mu_);
      auto& idle = idle_[static_cast<size_t>(node)];
      if (idle.size() < kMaxIdlePerNode) idle.push_back(std::move(client));
    }
    if (!r) return r.status().with_context("node " + spec.id);
    return r;
  }
}

ptc::Result<json> PeerPool::call(int node, const json& request, const transport::ProgressSink& progress) {
  return with_client(node, [&](transport::RpcClient& c) { return c.call(request, progress); });
}

ptc::Result<json> PeerPool::call_data(int node, const json& request, std::string& out, uint64_t max_bytes) {
  return with_client(node, [&](transport::RpcClient& c) {
    auto r = c.call_data(request, out, max_bytes);
    if (r) received_ += out.size();
    return r;
  });
}

}  // namespace ptcfs
