#include "daemon/daemon_config.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "daemon/store/file_util.h"
#include "transport/auth.h"
#include "transport/frame.h"

namespace ptcfs {
namespace {
bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }
}  // namespace

Result<DaemonConfig> resolve_daemon_config(const DaemonFlags& f) {
  DaemonConfig c;
  c.data = f.data;
  c.mount = f.mount;
  c.listen = f.listen;
  std::string secret_file = f.secret_file;
  c.etcd = f.etcd;
  c.etcd_tls = f.etcd_tls;
  if (f.etcd.empty() && (!f.etcd_tls.ca_file.empty() || !f.etcd_tls.cert_file.empty() || !f.etcd_tls.key_file.empty()))
    return invalid("--etcd-ca, --etcd-cert and --etcd-key go with --etcd https://...");
  if (!f.etcd.empty()) {
    if (!f.cluster.empty()) return invalid("--etcd and --cluster exclude each other (etcd keeps the members)");
    if (f.node.empty()) return invalid("--etcd needs --node ID (this node's id in the cluster)");
    if (!f.listen_given) return invalid("--etcd needs --listen HOST:PORT (the address peers reach this node at)");
    if (f.gpus < 1) return invalid("--gpus must be at least 1");
    if (f.listen.rfind("0.0.0.0:", 0) == 0 || f.listen.rfind("[::]:", 0) == 0)
      return invalid("--listen " + f.listen + ": with --etcd, give the address peers reach this node at");
    ptc::ClusterConfig self;
    self.nodes.push_back({f.node, f.listen, f.gpus});
    PTC_RETURN_IF_ERROR(ptc::parse_cluster_json(
                            nlohmann::json{{"nodes", {{{"id", f.node}, {"addr", f.listen}, {"gpus", f.gpus}}}}}.dump(),
                            "--node/--listen/--gpus")
                            .status());
    c.cluster = std::move(self);
    c.node = 0;
  } else if (f.cluster.empty() != f.node.empty()) {
    return invalid("--cluster and --node go together (or --etcd and --node)");
  }
  if (!f.cluster.empty()) {
    PTC_ASSIGN_OR_RETURN(std::string text, read_small_file(f.cluster, 16 << 20));
    PTC_ASSIGN_OR_RETURN(ptc::ClusterConfig cluster, ptc::parse_cluster_json(text, f.cluster));
    c.node = cluster.find(f.node);
    if (c.node < 0) {
      std::string ids;
      for (const auto& n : cluster.nodes) ids += (ids.empty() ? "" : ", ") + n.id;
      return invalid("--node " + f.node + ": not in " + f.cluster + " (nodes: " + ids + ")");
    }
    const std::string& addr = cluster.nodes[static_cast<size_t>(c.node)].addr;
    if (f.listen_given && f.listen != addr)
      return invalid("--listen " + f.listen + " differs from node " + f.node + "'s addr " + addr + " in " + f.cluster);
    c.listen = addr;
    if (secret_file.empty() && !cluster.secret_file.empty()) {
      const std::filesystem::path p(cluster.secret_file);
      secret_file = p.is_absolute() ? p.string() : (std::filesystem::path(f.cluster).parent_path() / p).string();
    }
    c.cluster = std::move(cluster);
  }
  if (!secret_file.empty()) {
    PTC_ASSIGN_OR_RETURN(c.secret, transport::read_secret_file(secret_file));
  }
  std::string host;
  uint16_t port = 0;
  PTC_RETURN_IF_ERROR(transport::parse_address(c.listen, host, port).with_context("listen address"));
  if (c.secret.empty() && !is_loopback(host))
    return invalid("listen address " + c.listen +
                   ": without a cluster secret (--secret-file or cluster.json's secret_file) ptcfsd listens on "
                   "loopback only");
  return c;
}

}  // namespace ptcfs
