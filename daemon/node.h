// One ptcfs node: the store, the mount, the control server and, on a cluster, the peer parts,
// built complete and in order by start() and torn down in the reverse order by the destructor
// (docs/ARCHITECTURE.md "A node"). ptcfsd's main parses flags and holds a Node until a
// signal. Parts are wired at construction, with two exceptions where the parts form a circle:
// the save service is handed the DCP save peers after it (saves -> peer client -> peer service
// -> saves: SaveService::set_dcp_peers), and the peer service registers a hook with the
// participant (Participant::on_replaced, cleared by its destructor). The follower's wake-up
// raises a signal of the node's, which the catch-up ticker, started later, waits on.
//
// What differs between one node and a cluster is decided once, here: which ChangeRunner the
// control service and the save committer call (daemon/change/runner.h), and whether the peer
// service and the cluster's periodic work exist.
//
// Thread-safety: a Node is made and destroyed on one thread; its parts run their own threads
// (FUSE, RPC workers, tickers) until the destructor stops them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/change/runner.h"
#include "daemon/daemon_config.h"
#include "daemon/reshard/compactor.h"
#include "daemon/reshard/source_dir.h"
#include "daemon/ticker.h"
#include "ptc/base/status.h"

namespace ptcfs {

namespace fs {
class Filesystem;
}
namespace transport {
class PeerBackend;
class RpcServer;
}  // namespace transport
class Coordinator;
namespace durable {
class DurableTier;
}
class DcpSavePeers;
class Follower;
class LocalRunner;
class ControlService;
class DirectServer;
class EtcdMembership;
class Membership;
class MetricsExporter;
class PeerClient;
class PeerReader;
class Participant;
class PeerService;
class SaveService;
class Store;

// The flags of ptcfsd that are not its configuration (daemon/daemon_config.h) or logging.
struct NodeOptions {
  std::string metrics;        // HOST:PORT of /metrics; empty: none
  std::string direct_socket;  // empty: DATA/direct.sock; "none": no direct socket
  int gpus = 1;
  int64_t lease_ttl_s = 10;
  int64_t prepare_expiry_s = 600;
  uint64_t compact_below = CompactionPolicy{}.min_piece;
  uint64_t hf_shard_bytes = 5'000'000'000;  // fs::MountOptions::hf_shard_bytes
  double peer_timeout_s = 10;
  bool fuse_debug = false;
  bool allow_other = true;
  std::optional<transport::S3Access> s3;  // --s3-endpoint and the rest: imports from s3://
  std::string s3_durable;                 // --s3-durable s3://BUCKET/PREFIX: the write-through tier
  uint64_t s3_part_mib = 64;              // --s3-part-mib: its multipart parts
  uint64_t disk_budget_mib = 0;           // --disk-budget-mib: evict durable steps' blobs above it (0: never)
};

class Node {
 public:
  // Opens the store, mounts, binds and serves the control address, and on a cluster joins it.
  // An error names the part that failed; whatever was built is torn down again.
  static Result<std::unique_ptr<Node>> start(const DaemonConfig& cfg, const NodeOptions& opts);
  ~Node();  // stops serving, leaves the cluster, unmounts
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

 private:
  Node(DaemonConfig cfg, NodeOptions opts);
  Status join_cluster();  // the peer backend, the reader of peers' data, the membership
  Status open_store();    // and the save service, the peer service and the runner
  Status open_tier();     // the write-through S3 tier, with --s3-durable
  Status mount();         // the filesystem and the direct socket
  Status serve();         // the control server and the metrics
  void run();             // the cluster's watch and catch-up, FUSE, the tickers
  // With etcd: waits (at most kCatchUpBeforeServing) until this node serves every record etcd
  // holds, catching up meanwhile.
  void catch_up_before_serving();
  static constexpr std::chrono::seconds kCatchUpBeforeServing{60};
  void tick(unsigned tick);  // every second
  void commit_saves(unsigned tick);
  void refresh_mount();

  const DaemonConfig cfg_;
  const NodeOptions opts_;
  const SourceDirs sources_;  // where imports read from: local folders, and S3 with --s3-endpoint
  // Declared in the order start() builds them.
  std::unique_ptr<transport::PeerBackend> peers_;  // a cluster only, like reader_ and membership_
  std::unique_ptr<PeerReader> reader_;
  std::unique_ptr<Membership> membership_;
  EtcdMembership* etcd_ = nullptr;  // membership_, with etcd
  std::unique_ptr<Store> store_;
  Signal saves_ready_;
  std::unique_ptr<SaveService> saves_;
  std::unique_ptr<Participant> participant_;  // a cluster only, like the peer service
  std::unique_ptr<PeerService> peer_service_;
  std::unique_ptr<PeerClient> peer_client_;
  std::unique_ptr<DcpSavePeers> dcp_save_peers_;  // saves_ reaches the other nodes' staged DCP files through it
  std::unique_ptr<LocalRunner> local_runner_;     // one node
  std::unique_ptr<Coordinator> coordinator_;      // a cluster, with follower_
  std::unique_ptr<Follower> follower_;
  std::unique_ptr<durable::DurableTier> tier_;  // --s3-durable
  ChangeRunner* runner_ = nullptr;              // local_runner_ or coordinator_
  std::unique_ptr<fs::Filesystem> fs_;
  std::unique_ptr<DirectServer> direct_;
  std::unique_ptr<transport::RpcServer> server_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<MetricsExporter> metrics_;
  std::atomic<bool> stopping_{false};
  // Set once the mount answers (with etcd: once caught up); the direct socket's opens wait for it.
  std::mutex serving_mu_;
  std::condition_variable serving_cv_;
  bool serving_ = false;
  void set_serving();
  std::thread catch_up_, fuse_thread_;
  std::unique_ptr<Ticker> save_committer_;
  unsigned saves_tick_ = 0;  // the committer's last period (its thread only)
  Signal never_;
  std::unique_ptr<Ticker> ticker_;
  Signal catch_up_signal_;             // its own: a raise is taken by one ticker of a signal
  std::unique_ptr<Ticker> caught_up_;  // on a cluster: Follower::catch_up (static), catch_up_if_behind (etcd)
};

}  // namespace ptcfs
