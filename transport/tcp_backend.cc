#include <atomic>
#include <mutex>
#include <vector>

#include "ptc/base/metrics.h"
#include "transport/backend.h"

namespace ptcfs::transport {

using nlohmann::json;

namespace {

constexpr size_t kMaxIdlePerNode = 16;

class TcpBackend final : public PeerBackend {
 public:
  TcpBackend(ptc::ClusterConfig cluster, std::string secret, PeerDeadlines deadlines)
      : cluster_(std::make_shared<const ptc::ClusterConfig>(std::move(cluster))),
        secret_(std::move(secret)),
        deadlines_(deadlines),
        idle_(cluster_->nodes.size()) {}
  std::shared_ptr<const ptc::ClusterConfig> cluster() const override {
    std::lock_guard lock(mu_);
    return cluster_;
  }
  int add_node(const ptc::NodeSpec& node) override;
  Result<json> call(int node, const json& request, const ProgressSink& progress) override;
  Result<json> call_data(int node, const json& request, std::string& out, uint64_t max_bytes) override;
  Result<json> call_into(int node, const json& request, uint64_t len, const IntoHooks& hooks) override;
  uint64_t bytes_received() const override { return received_.load(); }

 private:
  void count_received(int node, uint64_t n);
  template <class Fn>
  Result<json> with_client(int node, Fn&& fn);

  mutable std::mutex mu_;                              // guards cluster_ and idle_
  std::shared_ptr<const ptc::ClusterConfig> cluster_;  // replaced, never changed in place
  std::string secret_;
  PeerDeadlines deadlines_;
  std::vector<std::vector<std::unique_ptr<RpcClient>>> idle_;  // per node
  std::atomic<uint64_t> received_{0};
};

template <class Fn>
Result<json> TcpBackend::with_client(int node, Fn&& fn) {
  Deadlines d;
  d.connect = deadlines_.connect;
  d.idle = deadlines_.idle;
  const auto table = cluster();
  if (node < 0 || static_cast<size_t>(node) >= table->nodes.size()) return internal("no node " + std::to_string(node));
  const auto& spec = table->nodes[static_cast<size_t>(node)];
  // An idle connection may have been closed by the peer meanwhile (it restarted, or its
  // idle timer ran out): such a failure is retried once on a new connection.
  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<RpcClient> client;
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
      auto c = RpcClient::connect(spec.addr, secret_, d);
      if (!c) {
        metrics::peer_error(spec.id);
        return c.status().with_context("node " + spec.id);
      }
      client = std::move(c).value();
    }
    Result<json> r = fn(*client);
    const bool broken = client->broken();
    // A reused connection found closed is retried; one that timed out is not (the peer is
    // slow or stopped, and a second wait would double the deadline).
    if (broken && reused && r.status().code() == Code::kUnavailable) continue;
    if (!broken) {
      std::lock_guard lock(mu_);
      auto& idle = idle_[static_cast<size_t>(node)];
      if (idle.size() < kMaxIdlePerNode) idle.push_back(std::move(client));
    }
    if (!r) {
      metrics::peer_error(spec.id);
      return r.status().with_context("node " + spec.id);
    }
    return r;
  }
}

int TcpBackend::add_node(const ptc::NodeSpec& node) {
  std::lock_guard lock(mu_);
  auto next = std::make_shared<ptc::ClusterConfig>(*cluster_);
  int at = next->find(node.id);
  if (at >= 0) {
    auto& known = next->nodes[static_cast<size_t>(at)];
    if (known.addr == node.addr && known.gpus == node.gpus) return at;
    if (known.addr != node.addr) idle_[static_cast<size_t>(at)].clear();
    known = node;
  } else {
    at = static_cast<int>(next->nodes.size());
    next->nodes.push_back(node);
    idle_.emplace_back();
  }
  cluster_ = std::move(next);
  return at;
}

Result<json> TcpBackend::call(int node, const json& request, const ProgressSink& progress) {
  return with_client(node, [&](RpcClient& c) {
    c.set_deadlines({deadlines_.connect, deadlines_.idle, deadlines_.call});
    return c.call(request, progress);
  });
}

Result<json> TcpBackend::call_data(int node, const json& request, std::string& out, uint64_t max_bytes) {
  return with_client(node, [&](RpcClient& c) {
    c.set_deadlines({deadlines_.connect, deadlines_.idle, deadlines_.data});
    auto r = c.call_data(request, out, max_bytes);
    if (r) count_received(node, out.size());
    return r;
  });
}

Result<json> TcpBackend::call_into(int node, const json& request, uint64_t len, const IntoHooks& hooks) {
  return with_client(node, [&](RpcClient& c) {
    c.set_deadlines({deadlines_.connect, deadlines_.idle, deadlines_.data});
    auto r = c.call_into(request, len, hooks);
    if (r) count_received(node, len);
    return r;
  });
}

void TcpBackend::count_received(int node, uint64_t n) {
  received_ += n;
  const auto table = cluster();
  if (node >= 0 && static_cast<size_t>(node) < table->nodes.size())
    metrics::peer_received(table->nodes[static_cast<size_t>(node)].id, n);
}

}  // namespace

std::unique_ptr<PeerBackend> make_tcp_backend(ptc::ClusterConfig cluster, std::string secret, PeerDeadlines deadlines) {
  return std::make_unique<TcpBackend>(std::move(cluster), std::move(secret), deadlines);
}

}  // namespace ptcfs::transport
