// ptcfsd: the node daemon. Parses its flags, starts the node (daemon/node.h: the store, the
// mount, the control server, the cluster's parts) and stops it cleanly (unmounting) on
// SIGINT, SIGTERM or SIGHUP.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "daemon/daemon_config.h"
#include "daemon/listen_checks.h"
#include "daemon/node.h"
#include "transport/s3_client.h"
#include "ptc/base/log.h"

namespace {

struct Options {
  std::string data, mount, listen = "127.0.0.1:7070", cluster, node, secret_file, etcd, log_level = "info";
  std::string log_format = "text";
  std::string s3_endpoint, s3_region, s3_credentials, s3_ca_file;
  ptcfs::transport::EtcdTls etcd_tls;
  ptcfs::NodeOptions node_opts;
};

void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Resolves the configuration, starts the node and holds it until SIGINT, SIGTERM or SIGHUP.
// Exit status: 2 for a configuration or flag error (nothing was joined or mounted), 1 when a
// part of the node failed to start, 0 after a clean stop.
int run(const Options& o, bool listen_given) {
  using namespace ptcfs;
  auto cfg = resolve_daemon_config(DaemonFlags{o.data, o.mount, o.listen, o.cluster, o.node, o.secret_file, o.etcd,
                                               o.etcd_tls, o.node_opts.gpus, listen_given});
  if (!cfg) {
    log::error("{}", cfg.status().message());
    return 2;
  }
  // Before anything is joined or mounted: a flag only a listener can judge.
  if (auto s = check_listen_flags(ListenFlags{cfg->listen, o.node_opts.metrics, o.node_opts.direct_socket}); !s) {
    log::error("{}", s.message());
    return 2;
  }
  auto s3 = transport::resolve_s3_access(o.s3_endpoint, o.s3_region, o.s3_credentials, o.s3_ca_file);
  if (!s3) {
    log::error("{}", s3.status().message());
    return 2;
  }
  if (!o.node_opts.s3_durable.empty()) {
    auto at = transport::parse_s3_url(o.node_opts.s3_durable);
    if (!at) {
      log::error("--s3-durable: {}", at.status().message());
      return 2;
    }
    if (!*s3) {
      log::error("--s3-durable {} needs an S3 endpoint: --s3-endpoint or AWS_ENDPOINT_URL", o.node_opts.s3_durable);
      return 2;
    }
  }
  Options with = o;
  with.node_opts.s3 = *s3;
  if (*s3)
    log::info("S3: {} (region {}, {})", (*s3)->endpoint.url(), (*s3)->region,
              (*s3)->credentials.anonymous() ? "anonymous" : "signed with SigV4");
  raise_fd_limit();
  // Signals are taken by sigwait in this thread only; every thread the node starts inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto node = Node::start(*cfg, with.node_opts);
  if (!node) {
    log::error("{}", node.status().message());
    return 1;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  log::info("received signal {}; stopping", sig);
  node->reset();
  log::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Buffers of 1 MiB and more (compaction's and peer reads' 16 MiB, dataset copies, gathered
  // replies) are mapped and unmapped each time. glibc would otherwise raise its mmap threshold
  // after the first such free and keep later ones in per-thread arenas: the load test saw the
  // daemon's anonymous memory grow by 16 MiB per repartition up to ~300 MB and stay there.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  Options o;
  CLI::App app{
      "ptcfsd: the ptcfs node daemon. Mounts the node's tensor store as a FUSE filesystem and serves `ptcfs`."};
  app.add_option("--data", o.data, "Data directory (blobs and metadata); created if missing")->required();
  app.add_option("--mount", o.mount, "Mount point; created if missing; a stale mount there is recovered")->required();
  auto* listen =
      app.add_option("--listen", o.listen, "Control address HOST:PORT (loopback only without a cluster secret)")
          ->capture_default_str();
  app.add_option(
      "--etcd", o.etcd,
      "etcd endpoints http://HOST:PORT[,...] or https://...: the node registers there (with --node, --listen, --gpus) "
      "and every commit is an etcd transaction; nodes join and leave at runtime");
  app.add_option("--etcd-ca", o.etcd_tls.ca_file,
                 "With https:// --etcd: the CA that signed etcd's certificate (PEM; default: the system's CAs)");
  app.add_option("--etcd-cert", o.etcd_tls.cert_file,
                 "With https:// --etcd: this node's client certificate (PEM), for etcd's --client-cert-auth");
  app.add_option("--etcd-key", o.etcd_tls.key_file, "With https:// --etcd: the key of --etcd-cert (PEM)");
  app.add_option("--gpus", o.node_opts.gpus, "GPUs of this node (with --etcd): ranks placed on it")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--lease-ttl", o.node_opts.lease_ttl_s,
                 "Seconds of this node's etcd lease: a node that stops renewing it leaves the cluster that long "
                 "after, and the changes it was coordinating are dropped; it stops taking part in changes after "
                 "half of it without etcd")
      ->check(CLI::Range(2, 3600))
      ->capture_default_str();
  app.add_option("--prepare-expiry", o.node_opts.prepare_expiry_s,
                 "Seconds a prepared change may wait for its commit or abort before this node drops it")
      ->check(CLI::Range(5, 86400))
      ->capture_default_str();
  app.add_option("--cluster", o.cluster,
                 "cluster.json: the nodes, their addresses and GPUs, the secret file; the node joins that cluster");
  app.add_option("--node", o.node, "This node's id in cluster.json; the daemon listens on its addr");
  app.add_option("--secret-file", o.secret_file,
                 "Cluster secret: every client must prove it holds it; allows a non-loopback --listen");
  app.add_option("--compact-below", o.node_opts.compact_below,
                 "Repartition copies a re-cut slice into a blob of its own when its pieces are smaller than this "
                 "many bytes; larger pieces are remapped")
      ->capture_default_str();
  app.add_option("--hf-shard-size", o.node_opts.hf_shard_bytes,
                 "Bytes past which a step's hf/ view starts a new safetensors file (docs/FORMATS.md \"The Hugging "
                 "Face view\")")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--peer-timeout", o.node_opts.peer_timeout_s,
                 "Seconds a peer may stay silent (no reply, no keepalive) before its call fails: a read of its "
                 "shard with EIO, a change with an error")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--log-level", o.log_level, "debug, info, warn or error")->capture_default_str();
  app.add_option("--log-format", o.log_format,
                 "text (for people), logfmt (ts= level= msg= on one line) or json (one object per line), to stderr")
      ->check(CLI::IsMember({"text", "logfmt", "json"}))
      ->capture_default_str();
  app.add_option("--metrics", o.node_opts.metrics,
                 "Serve Prometheus metrics at http://HOST:PORT/metrics (docs/OPERATIONS.md); off by default");
  app.add_option("--direct-socket", o.node_opts.direct_socket,
                 "Unix socket of the direct data path: processes of this uid (or root) on the node read files of "
                 "the mount without FUSE (ptcfs.direct); default DATA/direct.sock, `none` for no socket");
  app.add_option("--s3-endpoint", o.s3_endpoint,
                 "S3 endpoint, http(s)://HOST[:PORT] (default: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL): `ptcfs "
                 "import s3://BUCKET/PREFIX` reads from it (docs/OPERATIONS.md \"The S3 tier\")");
  app.add_option("--s3-region", o.s3_region,
                 "S3 region for SigV4 (default: AWS_REGION, AWS_DEFAULT_REGION, us-east-1)");
  app.add_option("--s3-credentials", o.s3_credentials,
                 "A file in the AWS shared-credentials format ([default] aws_access_key_id, aws_secret_access_key); "
                 "without it AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else anonymous. Never on the command line");
  app.add_option("--s3-ca-file", o.s3_ca_file, "CA bundle that the https S3 endpoint's certificate is checked against");
  app.add_option("--s3-durable", o.node_opts.s3_durable,
                 "s3://BUCKET/PREFIX: write every committed step through to S3 in the background, as "
                 "PREFIX/JOB/STEP/ (the `ptcfs export` format); needs an S3 endpoint (docs/OPERATIONS.md \"The S3 "
                 "tier\"); default PTCFS_S3_DURABLE")
      ->envname("PTCFS_S3_DURABLE");
  app.add_option("--s3-part-mib", o.node_opts.s3_part_mib,
                 "Size of the write-through tier's multipart parts in MiB (a file up to this size is one PUT)")
      ->check(CLI::Range(5, 5 * 1024))
      ->capture_default_str();
  app.add_option("--disk-budget-mib", o.node_opts.disk_budget_mib,
                 "With --s3-durable: while the blobs under DATA take more than this many MiB, evict those of the "
                 "durable steps used least recently; a read fetches them back from S3 (docs/OPERATIONS.md \"A disk "
                 "budget\"). 0: never; default PTCFS_DISK_BUDGET_MIB")
      ->envname("PTCFS_DISK_BUDGET_MIB")
      ->capture_default_str();
  app.add_flag("--fuse-debug", o.node_opts.fuse_debug, "Log every FUSE request (libfuse's -d)");
  app.add_flag("--no-allow-other{false}", o.node_opts.allow_other, "Only the mounting user may read the mount");
  app.set_version_flag("--version", PTCFS_VERSION);
  CLI11_PARSE(app, argc, argv);
  ptcfs::log::Level level;
  if (!ptcfs::log::parse_level(o.log_level, level)) {
    std::fprintf(stderr, "--log-level: unknown level '%s'\n", o.log_level.c_str());
    return 2;
  }
  ptcfs::log::set_level(level);
  ptcfs::log::Format format = ptcfs::log::Format::kText;
  ptcfs::log::parse_format(o.log_format, format);
  ptcfs::log::set_format(format);
  return run(o, listen->count() > 0);
}
