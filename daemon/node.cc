// The node (daemon/node.h): its parts built in order, each complete when made.
#include "daemon/node.h"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "daemon/change/local_runner.h"
#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/dcp_save_peers.h"
#include "daemon/cluster/etcd_membership.h"
#include "daemon/cluster/follower.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/peer_client.h"
#include "daemon/cluster/peer_reader.h"
#include "daemon/cluster/peer_service.h"
#include "daemon/control/control.h"
#include "daemon/direct/direct_server.h"
#include "daemon/durable/durable_tier.h"
#include "daemon/metrics_exporter.h"
#include "daemon/node_gauges.h"
#include "daemon/save/save_service.h"
#include "daemon/store/failpoint.h"
#include "daemon/store/prepared_record.h"
#include "daemon/store/store.h"
#include "fs/filesystem.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "transport/rpc.h"

namespace ptcfs {

namespace {

// A failed start's error: its message is the log line ptcfsd prints (the part that failed,
// then the cause with its code).
Status failed(const std::string& part, const Status& cause, const std::string& hint = "") {
  return error(cause.code(), (part.empty() ? "" : part + ": ") + cause.to_string() + hint);
}

// How long a starting node waits for etcd to answer (Node::join_cluster).
constexpr auto kJoinPatience = std::chrono::seconds(60);

// etcd without a quorum: a member that accepted the call and did not answer in time, or, of
// several members, one that refused the connection (the client names the last it tried) while
// others may be up. An etcd nobody answers at (a wrong --etcd of one endpoint) fails at once.
bool transient(const Status& s, const std::string& endpoints) {
  return s.code() == Code::kDeadlineExceeded ||
         (s.code() == Code::kUnavailable && endpoints.find(',') != std::string::npos);
}

}  // namespace

Node::Node(DaemonConfig cfg, NodeOptions opts) : cfg_(std::move(cfg)), opts_(std::move(opts)), sources_(opts_.s3) {}

Result<std::unique_ptr<Node>> Node::start(const DaemonConfig& cfg, const NodeOptions& opts) {
  std::unique_ptr<Node> n(new Node(cfg, opts));
  PTC_RETURN_IF_ERROR(n->join_cluster());
  PTC_RETURN_IF_ERROR(n->open_store());
  PTC_RETURN_IF_ERROR(n->open_tier());
  PTC_RETURN_IF_ERROR(n->mount());
  PTC_RETURN_IF_ERROR(n->serve());
  n->run();
  return n;
}

Status Node::join_cluster() {
  if (!cfg_.cluster) return Status::ok();
  // Every peer call has deadlines: a stopped peer fails a change rather than hanging it.
  transport::PeerDeadlines deadlines;
  deadlines.idle = std::chrono::milliseconds(static_cast<int64_t>(opts_.peer_timeout_s * 1000));
  deadlines.connect = std::min(deadlines.connect, deadlines.idle);
  deadlines.data = std::max(deadlines.data, deadlines.idle);
  peers_ = transport::make_tcp_backend(*cfg_.cluster, cfg_.secret, deadlines);
  reader_ = std::make_unique<PeerReader>(*peers_, cfg_.node);
  // Who the members are and where commits are decided: etcd, or cluster.json.
  if (cfg_.etcd.empty()) {
    membership_ = std::make_unique<StaticMembership>(*peers_);
    return Status::ok();
  }
  const std::string& id = cfg_.cluster->nodes[static_cast<size_t>(cfg_.node)].id;
  const EtcdOptions etcd{cfg_.etcd, cfg_.etcd_tls, id, cfg_.listen, opts_.gpus, opts_.lease_ttl_s};
  // etcd without a quorum (members restarting, an election) answers again within moments: a node
  // started meanwhile waits for it, up to kJoinPatience, rather than exit and be restarted later
  // by its supervisor's back-off. A refusal (TLS, a node id in use) fails at once.
  const auto give_up = std::chrono::steady_clock::now() + kJoinPatience;
  auto m = EtcdMembership::join(etcd, *peers_);
  while (!m && transient(m.status(), cfg_.etcd) && std::chrono::steady_clock::now() < give_up) {
    log::warn("joining the cluster in etcd: {}; trying again for up to {} s", m.status().to_string(),
              std::chrono::duration_cast<std::chrono::seconds>(give_up - std::chrono::steady_clock::now()).count());
    std::this_thread::sleep_for(std::chrono::seconds(1));
    m = EtcdMembership::join(etcd, *peers_);
  }
  if (!m) return failed("joining the cluster in etcd", m.status());
  etcd_ = m->get();
  membership_ = std::move(m).value();
  return Status::ok();
}

Status Node::open_store() {
  // Every published change refreshes the mount (once there is one).
  auto store = Store::open(cfg_.data, reader_.get(), reader_.get(), [this] { refresh_mount(); });
  if (!store) return failed("opening data directory " + cfg_.data, store.status());
  store_ = std::move(store).value();
  CompactionPolicy policy;
  policy.min_piece = opts_.compact_below;
  // Steps saved into the mount: the save committer (run()) asks the runner to commit them.
  saves_ = std::make_unique<SaveService>(
      *store_, [this] { saves_ready_.raise(); }, [this] { refresh_mount(); });
  if (!cfg_.cluster) {
    for (auto& k : restore_prepared(*store_)) {  // kept by an earlier run in a cluster: nothing decides them here
      abort_change(*store_, k.change);
      forget_prepared(*store_, k.tx);
    }
    local_runner_ = std::make_unique<LocalRunner>(*store_, *saves_, policy, sources_);
    runner_ = local_runner_.get();
    return Status::ok();
  }
  PrepareOptions prep;
  prep.policy = policy;
  prep.sources = &sources_;
  participant_ = std::make_unique<Participant>(*store_, *membership_, *saves_, node_id(*peers_->cluster(), cfg_.node));
  peer_service_ =
      std::make_unique<PeerService>(*store_, *peers_, cfg_.node, *membership_, *saves_, *participant_, prep);
  peer_client_ = std::make_unique<PeerClient>(*peers_, cfg_.node, *peer_service_);
  dcp_save_peers_ = std::make_unique<DcpSavePeers>(*peer_client_, *membership_);
  saves_->set_dcp_peers(dcp_save_peers_.get());
  coordinator_ = std::make_unique<Coordinator>(*store_, *peer_client_, *participant_, *membership_);
  // A record this node is behind on wakes the catch-up ticker (with etcd; run() starts it).
  follower_ = std::make_unique<Follower>(*store_, *peer_client_, *participant_, *membership_,
                                         [this] { catch_up_signal_.raise(); });
  runner_ = coordinator_.get();
  participant_->restore();  // changes prepared before a restart wait again for their decision
  return Status::ok();
}

Status Node::open_tier() {
  if (opts_.s3_durable.empty())
    return opts_.disk_budget_mib ? invalid(
                                       "--disk-budget-mib needs --s3-durable (evicted blobs are fetched back from "
                                       "the durable copy)")
                                 : Status::ok();
  if (!opts_.s3) return invalid("--s3-durable needs an S3 endpoint (--s3-endpoint or AWS_ENDPOINT_URL)");
  PTC_ASSIGN_OR_RETURN(const auto at, transport::parse_s3_url(opts_.s3_durable), "--s3-durable");
  auto client = transport::S3Client::make(opts_.s3->options(at));
  if (!client) return failed("--s3-durable " + opts_.s3_durable, client.status());
  // A read waits on a fetch back: a stopped S3 fails it in about 20 s (3 tries of 5 s without a
  // byte), not the uploads' two minutes.
  transport::S3Options read_opts = opts_.s3->options(at);
  read_opts.stall_timeout = std::chrono::seconds(5);
  read_opts.attempts = 3;
  auto reads = transport::S3Client::make(std::move(read_opts));
  if (!reads) return failed("--s3-durable " + opts_.s3_durable, reads.status());
  durable::TierOptions o;
  o.part_bytes = opts_.s3_part_mib << 20;
  o.disk_budget = opts_.disk_budget_mib << 20;
  if (cfg_.cluster) {
    o.self = node_id(*peers_->cluster(), cfg_.node);
    // The first holder of each shard writes its file (daemon/durable/durable_plan.h).
    o.holders = [this](const StepVersion& v) -> Result<std::vector<std::vector<std::string>>> {
      PTC_ASSIGN_OR_RETURN(auto held, reader_->holders(v));
      const auto table = peers_->cluster();
      std::vector<std::vector<std::string>> ids;
      for (const auto& nodes : *held) {
        ids.emplace_back();
        for (int n : nodes) ids.back().push_back(node_id(*table, n));
      }
      return ids;
    };
  }
  tier_ = std::make_unique<durable::DurableTier>(*store_, std::move(client).value(), std::move(reads).value(),
                                                 std::move(o));
  log::info("writing committed steps through to {}", tier_->where());
  if (follower_) {
    // A node caught up on a step holds again, over its durable copy, the shards no other node
    // holds (docs/OPERATIONS.md "A node that lost its data directory").
    follower_->set_restore([this](const StepVersion& next, const std::string& origin,
                                  const std::string& copy_origin) -> Result<std::optional<Follower::RestoredShards>> {
      auto held = reader_->holders(next);
      if (!held)  // not S3's silence (the follower stops asking S3 for a while on kUnavailable)
        return Status(Code::kFailedPrecondition, held.status().message());
      std::vector<size_t> mine;
      for (size_t s = 0; s < (*held)->size(); ++s)
        if ((**held)[s] == std::vector<int>{cfg_.node} && !next.holds(next.layout().shards()[s])) mine.push_back(s);
      if (mine.empty()) return std::optional<Follower::RestoredShards>{};
      PTC_ASSIGN_OR_RETURN(
          auto r, tier_->restore(next.job(), next.step(), next.version(), origin, copy_origin, next.layout(), mine));
      if (!r) return std::optional<Follower::RestoredShards>{};
      auto restored = std::make_shared<durable::DurableTier::Restored>(std::move(*r));
      Follower::RestoredShards out;
      out.stored = std::move(restored->shards.stored);
      for (const auto& e : restored->shards.blobs) out.blobs.push_back(e.blob);
      out.record = [this, restored, job = next.job(), step = next.step()] {
        return tier_->record_restore(job, step, *restored);
      };
      out.committed = [this, restored, job = next.job(), step = next.step()] {
        tier_->restore_committed(job, step, *restored);
      };
      return std::optional<Follower::RestoredShards>{std::move(out)};
    });
  }
  return Status::ok();
}

Status Node::mount() {
  // The direct data path (daemon/direct/direct_server.h): its socket, which the mount names to
  // clients in its hidden file .ptcfs-direct.
  std::string direct_path;
  if (opts_.direct_socket != "none") {
    std::error_code ec;
    direct_path = opts_.direct_socket.empty() ? std::filesystem::canonical(cfg_.data, ec).string() + "/direct.sock"
                                              : std::filesystem::absolute(opts_.direct_socket, ec).string();
  }
  fs::MountOptions mo;
  mo.mountpoint = cfg_.mount;
  mo.direct_socket = direct_path;
  mo.hf_shard_bytes = opts_.hf_shard_bytes;
  mo.debug = opts_.fuse_debug;
  mo.allow_other = opts_.allow_other;
  auto source = [this] {
    fs::Contents c = mount_contents(*store_);
    saves_->add_to(c);
    return c;
  };
  auto fsr = fs::Filesystem::mount(mo, source, saves_.get());
  if (!fsr) return failed("mounting " + cfg_.mount, fsr.status());
  fs_ = std::move(fsr).value();
  if (direct_path.empty()) return Status::ok();
  std::error_code ec;
  const std::string mount = std::filesystem::canonical(cfg_.mount, ec).string();
  std::filesystem::create_directories(std::filesystem::path(direct_path).parent_path(), ec);  // /run/ptcfs
  auto d = DirectServer::start(direct_path, mount, [this](const std::string& rel) {
    {
      std::unique_lock lock(serving_mu_);
      serving_cv_.wait(lock, [this] { return serving_ || stopping_; });
    }
    return fs_->open_view(rel);
  });
  if (!d) return failed("", d.status(), " (--direct-socket none runs without it)");
  direct_ = std::move(d).value();
  return Status::ok();
}

Status Node::serve() {
  // Bound first: `status` reports the bound address, known before any request can read it.
  auto server = transport::RpcServer::bind(cfg_.listen, transport::ServerLimits{}, cfg_.secret);
  if (!server) return failed("", server.status());
  server_ = std::move(server).value();
  control_ = std::make_unique<ControlService>(
      *store_, *runner_, *saves_, DaemonInfo{cfg_.data, cfg_.mount, server_->address()}, tier_.get(), &sources_);
  // Peer operations go to the peer service, everything else to the control service.
  transport::RpcServer::Handler peer_handler = [this](const nlohmann::json& req, const transport::ProgressSink&) {
    if (!peer_service_)
      return Result<transport::Reply>(invalid("'" + member_string_or(req, "op", "").value_or("") +
                                              "' is a peer operation and this daemon is in no cluster"));
    return peer_service_->handle(req);
  };
  server_->serve(transport::route(
      {{"peer.", peer_handler}, {"", [this](const nlohmann::json& req, const transport::ProgressSink& p) {
                                   return control_->handle(req, p);
                                 }}}));
  failpoint("daemon.serving");
  if (!opts_.metrics.empty()) {
    const std::string id = cfg_.cluster ? cfg_.cluster->nodes[static_cast<size_t>(cfg_.node)].id : "";
    NodeGaugeSources sources{store_.get(), saves_.get(), participant_.get(), membership_.get(), direct_.get(), id};
    auto m = MetricsExporter::start(opts_.metrics, [sources] { return node_gauges(sources); });
    if (!m) return failed("", m.status());
    metrics_ = std::move(m).value();
    log::info("metrics at http://{}/metrics", metrics_->address());
  }
  log::info("ptcfsd {} serving {} at {}, control on {}{}", PTCFS_VERSION, cfg_.data, cfg_.mount, server_->address(),
            cfg_.secret.empty() ? "" : " (clients must prove the cluster secret)");
  return Status::ok();
}

void Node::run() {
  if (etcd_) {
    log::info("node {} ({} GPUs) in the cluster kept in etcd at {}: {} live nodes", coordinator_->id(), opts_.gpus,
              cfg_.etcd, membership_->members().size());
    // Every record (on start: each one there is) commits what it decides or brings this node to it.
    etcd_->start([f = follower_.get()](const KeyedRecord& record) { f->on_record(record); });
  } else if (cfg_.cluster) {
    log::info("node {} of a {}-node cluster ({} GPUs)", coordinator_->id(), cfg_.cluster->nodes.size(),
              cfg_.cluster->total_gpus());
  }
  // A node that was down while its peers repartitioned catches up with them.
  const auto stopping = [this] { return stopping_.load(); };
  if (follower_) catch_up_ = std::thread([f = follower_.get(), stopping] { f->catch_up(stopping); });
  save_committer_ =
      std::make_unique<Ticker>(saves_ready_, std::chrono::seconds(5), [this](unsigned tick) { commit_saves(tick); });
  ticker_ = std::make_unique<Ticker>(never_, std::chrono::seconds(1), [this](unsigned tick) { this->tick(tick); });
  // A node that missed a change while it stayed up (unreachable for a while; the others went on
  // without it) takes their versions of steps and datasets, as after a restart: on its own
  // thread, since asking a peer that is down waits for the peer timeout. Statically every 10 s;
  // with etcd a record this node is behind on (Follower::on_record) wakes this, and the steps
  // and datasets are caught up at once and on the next few ticks of 2 s.
  if (follower_) {
    if (etcd_) {
      caught_up_ =
          std::make_unique<Ticker>(catch_up_signal_, std::chrono::seconds(2),
                                   [f = follower_.get(), stopping](unsigned) { f->catch_up_if_behind(stopping); });
    } else {
      caught_up_ = std::make_unique<Ticker>(catch_up_signal_, std::chrono::seconds(10),
                                            [f = follower_.get(), stopping](unsigned) { f->catch_up(stopping); });
    }
  }
  // With etcd the mount answers once this node serves what etcd records (until then a process
  // opening a file waits in the kernel): a node back from a restart would otherwise serve what it
  // had, an old layout or dataset position, until its catch-up ran.
  fuse_thread_ = std::thread([this] {
    if (etcd_) catch_up_before_serving();
    set_serving();
    if (stopping_) return;
    if (auto s = fs_->run(); !s) log::error("{}", s.to_string());
    if (!stopping_) {
      log::warn("the filesystem was unmounted from outside; stopping");
      kill(getpid(), SIGTERM);
    }
  });
}

void Node::set_serving() {
  {
    std::lock_guard lock(serving_mu_);
    serving_ = true;
  }
  serving_cv_.notify_all();
}

void Node::catch_up_before_serving() {
  const auto stopping = [this] { return stopping_.load(); };
  const auto t0 = std::chrono::steady_clock::now();
  auto next_note = t0 + std::chrono::seconds(5);
  std::vector<RecordMark> behind;
  while (!stopping_) {
    const auto now = std::chrono::steady_clock::now();
    if (etcd_->synced()) {
      behind = follower_->catch_up_records(stopping);
      if (behind.empty()) {
        // Timed after the catch-up: the first pass may do all of it itself (`now` is from before it).
        const auto took = std::chrono::steady_clock::now() - t0;
        if (took > std::chrono::seconds(1))
          log::info("caught up with etcd's records in {:.1f} s; the mount answers",
                    std::chrono::duration<double>(took).count());
        return;
      }
    }
    const std::string what = !etcd_->synced() ? "etcd's records (not read yet)"
                                              : std::to_string(behind.size()) + " records, first " + behind[0].what();
    if (now - t0 > kCatchUpBeforeServing) {
      log::error("still behind on {} after {} s; the mount answers with what this node has", what,
                 kCatchUpBeforeServing.count());
      return;
    }
    if (now >= next_note) {
      log::info("catching up on {}; the mount answers once this node serves them", what);
      next_note = now + std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Every second: prepared changes whose coordinator's lease ended (or that waited too long)
// are dropped, changes whose decision etcd did not answer are settled once it answers, and
// missed aborts are sent again (Coordinator::settle paces those itself). Every 5 s: blobs of
// replaced versions are freed once the last reader closes them.
void Node::tick(unsigned tick) {
  if (participant_) participant_->expire(std::chrono::seconds(opts_.prepare_expiry_s));
  if (peer_service_) peer_service_->expire_reads();
  if (coordinator_) coordinator_->settle();
  if (tick % 5) return;
  if (auto r = store_->collect_garbage(); !r) log::warn("collecting blobs: {}", r.status().to_string());
}

// The steps saved into the mount that are ready, as soon as one is; every 5 s also every part
// still waiting (on a cluster, a word to the deciding node may have been lost: it was down).
void Node::commit_saves(unsigned tick) {
  auto ready = saves_->take_ready();
  if (tick != saves_tick_) {
    saves_tick_ = tick;
    for (auto& r : saves_->ready_parts()) ready.push_back(std::move(r));
  }
  for (const auto& [job, step] : ready)
    if (auto s = runner_->save_commit(SaveCommitRequest{job, step}); !s)
      log::debug("save of {}/{}: {}", job, step, s.to_string());
}

void Node::refresh_mount() {
  if (tier_) tier_->notice();
  // Changes made before the mount exists (restoring prepared changes) need no refresh.
  if (!fs_) return;
  failpoint("mount.refresh");
  if (auto s = fs_->refresh(); !s) log::error("refreshing the mount: {}", s.to_string());
  // The replaced version's metadata is freed now (nobody else holds it: the tree was its last
  // holder). glibc keeps freed memory in its arenas, one per thread that allocated it: a step of
  // 100,000 tensors left 150-300 MB there per repartition (docs/OPERATIONS.md "Memory").
  malloc_trim(0);
}

Node::~Node() {
  stopping_ = true;
  set_serving();  // the direct socket's opens waiting for it go on (and find the node stopping)
  ticker_.reset();
  caught_up_.reset();
  save_committer_.reset();
  if (catch_up_.joinable()) catch_up_.join();
  if (server_) server_->stop();
  direct_.reset();  // lets go of the versions its clients held
  metrics_.reset();
  if (etcd_) etcd_->stop();  // leaves the cluster at once; its watch calls the coordinator no more
  if (fs_) fs_->stop();
  if (fuse_thread_.joinable()) fuse_thread_.join();
  fs_.reset();    // unmounts
  tier_.reset();  // no change commits any more: an upload under way stops between its parts
  // The rest goes in the reverse order of construction (the members' order).
}

}  // namespace ptcfs
