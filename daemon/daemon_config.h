// ptcfsd's configuration, resolved once from its flags: where to listen, the cluster
// secret, and, with --cluster/--node, the cluster and this node's place in it.
#pragma once

#include <optional>
#include <string>

#include "ptc/base/status.h"
#include "ptc/cluster.h"
#include "transport/etcd_client.h"

namespace ptcfs {

struct DaemonFlags {
  std::string data, mount, listen, cluster, node, secret_file, etcd;
  transport::EtcdTls etcd_tls;  // --etcd-ca, --etcd-cert, --etcd-key
  int gpus = 1;
  bool listen_given = false;  // --listen was on the command line
};

struct DaemonConfig {
  std::string data, mount, listen, secret;
  std::optional<ptc::ClusterConfig> cluster;  // with --etcd: this node only (others join at runtime)
  int node = -1;                              // index into cluster->nodes
  std::string etcd;                           // etcd's endpoints (empty: static mode, or one node)
  transport::EtcdTls etcd_tls;                // for https:// endpoints
};

// Validates the flags: --etcd needs --node and --listen (the address peers reach this node
// at: not 0.0.0.0) and excludes --cluster; --cluster and --node go together; the node must be in cluster.json
// and the daemon listens on its addr (a different --listen is an error); the secret comes
// from --secret-file, else from cluster.json's secret_file (relative to cluster.json's
// folder); without a secret only a loopback address is allowed. The etcd TLS files need
// --etcd (and https:// endpoints: the etcd client checks that and the files).
Result<DaemonConfig> resolve_daemon_config(const DaemonFlags& f);

}  // namespace ptcfs
