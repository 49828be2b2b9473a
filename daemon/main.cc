// ptcfsd: the node daemon. Opens the store, mounts the filesystem, serves the control
// protocol, and stops cleanly (unmounting) on SIGINT or SIGTERM.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/etcd_membership.h"
#include "daemon/cluster/peer_reader.h"
#include "daemon/cluster/peer_service.h"
#include "daemon/control/control.h"
#include "daemon/daemon_config.h"
#include "daemon/direct/direct_server.h"
#include "daemon/listen_checks.h"
#include "daemon/metrics_exporter.h"
#include "daemon/node_gauges.h"
#include "daemon/save/save_service.h"
#include "daemon/store/failpoint.h"
#include "daemon/store/prepared_record.h"
#include "daemon/store/store.h"
#include "fs/filesystem.h"
#include "ptc/base/log.h"
#include "transport/rpc.h"

namespace {

struct Options {
  std::string data, mount, listen = "127.0.0.1:7070", cluster, node, secret_file, etcd, log_level = "info";
  std::string metrics, log_format = "text";
  ptcfs::transport::EtcdTls etcd_tls;
  std::string direct_socket;  // empty: DATA/direct.sock; "none": no direct socket
  int gpus = 1;
  int64_t lease_ttl_s = 10;
  int64_t prepare_expiry_s = 600;
  uint64_t compact_below = ptcfs::CompactionPolicy{}.min_piece;
  double peer_timeout_s = 10;
  bool fuse_debug = false;
  bool allow_other = true;
};

void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int run(const Options& o, bool listen_given) {
  using namespace ptcfs;
  auto cfg_r = resolve_daemon_config(
      DaemonFlags{o.data, o.mount, o.listen, o.cluster, o.node, o.secret_file, o.etcd, o.etcd_tls, o.gpus,
                  listen_given});
  if (!cfg_r) {
    ptc::log::error("{}", cfg_r.status().message());
    return 2;
  }
  const DaemonConfig& cfg = *cfg_r;
  // Before anything is joined or mounted: a flag only a listener can judge.
  if (auto s = check_listen_flags(ListenFlags{cfg.listen, o.metrics, o.direct_socket}); !s) {
    ptc::log::error("{}", s.message());
    return 2;
  }
  const std::string& secret = cfg.secret;
  raise_fd_limit();

  // Signals are taken by sigwait in this thread only; every thread started below inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  CompactionPolicy policy;
  policy.min_piece = o.compact_below;

  // In a cluster: the peer backend (every call with deadlines), the reader of other nodes'
  // shards and samples for the mount (the store's versions refer to it), then, over the
  // store, the service answering peers and the coordinator of changes. Built in that order,
  // each complete when made.
  std::unique_ptr<transport::PeerBackend> peers;
  std::unique_ptr<PeerReader> reader;
  if (cfg.cluster) {
    transport::PeerDeadlines deadlines;
    deadlines.idle = std::chrono::milliseconds(static_cast<int64_t>(o.peer_timeout_s * 1000));
    deadlines.connect = std::min(deadlines.connect, deadlines.idle);
    deadlines.data = std::max(deadlines.data, deadlines.idle);
    peers = transport::make_tcp_backend(*cfg.cluster, secret, deadlines);
    reader = std::make_unique<PeerReader>(*peers, cfg.node);
  }
  // Who the members are and where commits are decided: etcd, or cluster.json.
  std::unique_ptr<Membership> membership;
  EtcdMembership* etcd = nullptr;
  if (!cfg.etcd.empty()) {
    auto m =
        EtcdMembership::join(EtcdOptions{cfg.etcd, cfg.etcd_tls, o.node, cfg.listen, o.gpus, o.lease_ttl_s}, *peers);
    if (!m) {
      ptc::log::error("joining the cluster in etcd: {}", m.status().to_string());
      return 1;
    }
    etcd = m->get();
    membership = std::move(m).value();
  } else if (cfg.cluster) {
    membership = std::make_unique<StaticMembership>(*peers);
  }
  auto store = Store::open(o.data, reader.get(), reader.get());
  if (!store) {
    ptc::log::error("opening data directory {}: {}", o.data, store.status().to_string());
    return 1;
  }
  Store& st = **store;
  // Steps saved into the mount; in a cluster they commit on every node together.
  auto saves = std::make_unique<SaveService>(st);
  std::unique_ptr<PeerService> peer_service;
  std::unique_ptr<PeerClient> peer_client;
  std::unique_ptr<Coordinator> coordinator;
  if (cfg.cluster) {
    PrepareOptions prep;
    prep.policy = policy;
    peer_service = std::make_unique<PeerService>(st, *peers, cfg.node, *membership, *saves, prep);
    peer_client = std::make_unique<PeerClient>(*peers, cfg.node, *peer_service);
    coordinator = std::make_unique<Coordinator>(st, *peer_client, *peer_service, *membership);
    peer_service->restore();  // changes prepared before a restart wait again for their decision
  } else {
    for (auto& k : restore_prepared(st)) {  // kept by an earlier run in a cluster: nothing decides them here
      abort_change(st, k.change);
      forget_prepared(st, k.tx);
    }
  }

  if (coordinator)
    saves->set_cluster([&c = *coordinator](const std::string& job, const std::string& step) {
      (void)c.save_commit(SaveCommitRequest{job, step});
    });

  // The direct data path (daemon/direct/direct_server.h): its socket, which the mount names
  // to clients in its hidden file .ptcfs-direct.
  std::string direct_path;
  if (o.direct_socket != "none") {
    std::error_code ec;
    direct_path = o.direct_socket.empty() ? std::filesystem::canonical(o.data, ec).string() + "/direct.sock"
                                          : std::filesystem::absolute(o.direct_socket, ec).string();
  }
  fs::MountOptions mo;
  mo.mountpoint = o.mount;
  mo.direct_socket = direct_path;
  mo.debug = o.fuse_debug;
  mo.allow_other = o.allow_other;
  auto source = [&st, &saves] {
    fs::Contents c = mount_contents(st);
    if (saves) saves->add_to(c);
    return c;
  };
  auto fsr = fs::Filesystem::mount(mo, source, saves.get());
  if (!fsr) {
    ptc::log::error("mounting {}: {}", o.mount, fsr.status().to_string());
    return 1;
  }
  auto& filesystem = **fsr;
  std::unique_ptr<DirectServer> direct;
  if (!direct_path.empty()) {
    std::error_code ec;
    const std::string mount = std::filesystem::canonical(o.mount, ec).string();
    std::filesystem::create_directories(std::filesystem::path(direct_path).parent_path(), ec);  // /run/ptcfs
    auto d = DirectServer::start(direct_path, mount, [&filesystem](const std::string& rel) {
      return filesystem.open_view(rel);
    });
    if (!d) {
      ptc::log::error("{} (--direct-socket none runs without it)", d.status().to_string());
      return 1;
    }
    direct = std::move(d).value();
  }
  st.on_change([&filesystem] {
    if (auto s = filesystem.refresh(); !s) ptc::log::error("refreshing the mount: {}", s.to_string());
  });
  if (saves)
    saves->on_change([&filesystem] {
      if (auto s = filesystem.refresh(); !s) ptc::log::error("refreshing the mount: {}", s.to_string());
    });

  DaemonInfo info{o.data, o.mount, cfg.listen, {}, {}};
  if (cfg.cluster) {
    info.node = cfg.cluster->nodes[static_cast<size_t>(cfg.node)].id;
    info.cluster = *cfg.cluster;
  }
  ControlService control(st, info, coordinator.get(), saves.get());
  control.set_compaction(policy);
  // Peer operations go to the peer service, everything else to the control service.
  transport::RpcServer::Handler peer_handler = [&](const nlohmann::json& req, const transport::ProgressSink&) {
    if (!peer_service)
      return ptc::Result<transport::Reply>(ptc::invalid("'" + req.value("op", std::string()) +
                                                        "' is a peer operation and this daemon is in no cluster"));
    return peer_service->handle(req);
  };
  // Bound first: `status` reports the bound address, set before any request can read it.
  auto server = transport::RpcServer::bind(cfg.listen, transport::ServerLimits{}, secret);
  if (!server) {
    ptc::log::error("{}", server.status().to_string());
    return 1;
  }
  control.set_listen((*server)->address());
  (*server)->serve(transport::route({{"peer.", peer_handler},
                                     {"", [&control](const nlohmann::json& req, const transport::ProgressSink& p) {
                                        return control.handle(req, p);
                                      }}}));
  failpoint("daemon.serving");
  std::unique_ptr<MetricsExporter> metrics;
  if (!o.metrics.empty()) {
    NodeGaugeSources sources{&st, saves.get(), peer_service.get(), membership.get(), direct.get(), info.node};
    auto m = MetricsExporter::start(o.metrics, [sources] { return node_gauges(sources); });
    if (!m) {
      ptc::log::error("{}", m.status().to_string());
      return 1;
    }
    metrics = std::move(m).value();
    ptc::log::info("metrics at http://{}/metrics", metrics->address());
  }
  ptc::log::info("ptcfsd {} serving {} at {}, control on {}{}", PTCFS_VERSION, o.data, o.mount, (*server)->address(),
                 secret.empty() ? "" : " (clients must prove the cluster secret)");
  if (etcd) {
    ptc::log::info("node {} ({} GPUs) in the cluster kept in etcd at {}: {} live nodes", info.node, o.gpus, cfg.etcd,
                   membership->members().size());
    // Every record (on start: each one there is) commits what it decides or brings this node to it.
    etcd->start([&c = *coordinator](const KeyedRecord& record) { c.on_record(record); });
  } else if (cfg.cluster) {
    ptc::log::info("node {} of a {}-node cluster ({} GPUs)", info.node, cfg.cluster->nodes.size(),
                   cfg.cluster->total_gpus());
  }

  // A node that was down while its peers repartitioned catches up with them.
  std::thread catch_up;
  if (coordinator) catch_up = std::thread([&c = *coordinator] { c.catch_up(); });

  std::atomic<bool> stopping{false};
  std::thread fuse_thread([&] {
    if (auto s = filesystem.run(); !s) ptc::log::error("{}", s.to_string());
    if (!stopping) {
      ptc::log::warn("the filesystem was unmounted from outside; stopping");
      kill(getpid(), SIGTERM);
    }
  });

  // Every second: prepared changes whose coordinator's lease ended (or that waited too long)
  // are dropped, and changes whose decision etcd did not answer are settled once it answers.
  // Every 5 s: blobs of replaced versions are freed once the last reader closes
  // them, missed aborts are sent again, and parts of saves say again that they are ready.
  std::mutex gc_mu;
  std::condition_variable gc_cv;
  std::thread gc_thread([&] {
    std::unique_lock lock(gc_mu);
    for (unsigned tick = 1; !gc_cv.wait_for(lock, std::chrono::seconds(1), [&] { return stopping.load(); }); ++tick) {
      if (peer_service) peer_service->expire(std::chrono::seconds(o.prepare_expiry_s));
      if (coordinator) {
        coordinator->settle();
        // Parts other nodes said are complete (peer.save_ready).
        for (const auto& [job, step] : saves->take_noted()) (void)coordinator->save_commit(SaveCommitRequest{job, step});
      }
      if (tick % 5) continue;
      if (auto r = st.collect_garbage(); !r) ptc::log::warn("collecting blobs: {}", r.status().to_string());
      if (coordinator) {
        // A part whose word to the deciding node was lost (it was down) says it again.
        for (const auto& [job, step] : saves->ready_parts()) (void)coordinator->save_commit(SaveCommitRequest{job, step});
      }
    }
  });

  int sig = 0;
  sigwait(&stop_signals, &sig);
  {
    std::lock_guard lock(gc_mu);
    stopping = true;
  }
  gc_cv.notify_all();
  gc_thread.join();
  ptc::log::info("received signal {}; stopping", sig);
  if (catch_up.joinable()) catch_up.join();
  (*server)->stop();
  direct.reset();  // lets go of the versions its clients held
  metrics.reset();
  if (etcd) etcd->stop();  // leaves the cluster at once; its watch calls the coordinator no more
  filesystem.stop();
  fuse_thread.join();
  saves.reset();  // its commit thread refreshes the mount: stop it first
  fsr->reset();  // unmounts
  ptc::log::info("stopped");
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
  CLI::App app{"ptcfsd: the ptcfs node daemon. Mounts the node's tensor store as a FUSE filesystem and serves `ptcfs`."};
  app.add_option("--data", o.data, "Data directory (blobs and metadata); created if missing")->required();
  app.add_option("--mount", o.mount, "Mount point; created if missing; a stale mount there is recovered")->required();
  auto* listen = app.add_option("--listen", o.listen,
                                "Control address HOST:PORT (loopback only without a cluster secret)")
                    ->capture_default_str();
  app.add_option("--etcd", o.etcd,
                 "etcd endpoints http://HOST:PORT[,...] or https://...: the node registers there (with --node, --listen, --gpus) "
                 "and every commit is an etcd transaction; nodes join and leave at runtime");
  app.add_option("--etcd-ca", o.etcd_tls.ca_file,
                 "With https:// --etcd: the CA that signed etcd's certificate (PEM; default: the system's CAs)");
  app.add_option("--etcd-cert", o.etcd_tls.cert_file,
                 "With https:// --etcd: this node's client certificate (PEM), for etcd's --client-cert-auth");
  app.add_option("--etcd-key", o.etcd_tls.key_file, "With https:// --etcd: the key of --etcd-cert (PEM)");
  app.add_option("--gpus", o.gpus, "GPUs of this node (with --etcd): ranks placed on it")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--lease-ttl", o.lease_ttl_s,
                 "Seconds of this node's etcd lease: a node that stops renewing it leaves the cluster that long "
                 "after, and the changes it was coordinating are dropped; it stops taking part in changes after "
                 "half of it without etcd")
      ->check(CLI::Range(2, 3600))
      ->capture_default_str();
  app.add_option("--prepare-expiry", o.prepare_expiry_s,
                 "Seconds a prepared change may wait for its commit or abort before this node drops it")
      ->check(CLI::Range(5, 86400))
      ->capture_default_str();
  app.add_option("--cluster", o.cluster,
                 "cluster.json: the nodes, their addresses and GPUs, the secret file; the node joins that cluster");
  app.add_option("--node", o.node, "This node's id in cluster.json; the daemon listens on its addr");
  app.add_option("--secret-file", o.secret_file,
                 "Cluster secret: every client must prove it holds it; allows a non-loopback --listen");
  app.add_option("--compact-below", o.compact_below,
                 "Repartition copies a re-cut slice into a blob of its own when its pieces are smaller than this "
                 "many bytes; larger pieces are remapped")
      ->capture_default_str();
  app.add_option("--peer-timeout", o.peer_timeout_s,
                 "Seconds a peer may stay silent (no reply, no keepalive) before its call fails: a read of its "
                 "shard with EIO, a change with an error")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--log-level", o.log_level, "debug, info, warn or error")->capture_default_str();
  app.add_option("--log-format", o.log_format,
                 "text (for people), logfmt (ts= level= msg= on one line) or json (one object per line), to stderr")
      ->check(CLI::IsMember({"text", "logfmt", "json"}))
      ->capture_default_str();
  app.add_option("--metrics", o.metrics,
                 "Serve Prometheus metrics at http://HOST:PORT/metrics (docs/OPERATIONS.md); off by default");
  app.add_option("--direct-socket", o.direct_socket,
                 "Unix socket of the direct data path: processes of this uid (or root) on the node read files of "
                 "the mount without FUSE (ptcfs.direct); default DATA/direct.sock, `none` for no socket");
  app.add_flag("--fuse-debug", o.fuse_debug, "Log every FUSE request (libfuse's -d)");
  app.add_flag("--no-allow-other{false}", o.allow_other, "Only the mounting user may read the mount");
  app.set_version_flag("--version", PTCFS_VERSION);
  CLI11_PARSE(app, argc, argv);
  ptc::log::Level level;
  if (!ptc::log::parse_level(o.log_level, level)) {
    std::fprintf(stderr, "--log-level: unknown level '%s'\n", o.log_level.c_str());
    return 2;
  }
  ptc::log::set_level(level);
  ptc::log::Format format = ptc::log::Format::kText;
  ptc::log::parse_format(o.log_format, format);
  ptc::log::set_format(format);
  return run(o, listen->count() > 0);
}
