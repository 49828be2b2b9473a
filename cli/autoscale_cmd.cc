#include "cli/autoscale_cmd.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "cli/allocate_cmd.h"
#include "cli/validators.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "ptc/planner/autoscale.h"

namespace ptcfs::cli {

using nlohmann::json;
using transport::EtcdClient;
using transport::EtcdCompare;
using transport::EtcdEvent;
using transport::EtcdWrite;
using Clock = std::chrono::steady_clock;

CLI::App* add_autoscale_command(CLI::App& app, AutoscaleArgs& a, Globals& g) {
  auto* cmd = app.add_subcommand(
      "autoscale",
      "Run the controller of a job queue in etcd: on each submit, finish or capacity change, decide every job's "
      "GPUs, global batch and (tp, pp, dp) again, repartition each changed job's latest step and write its "
      "decision for its launcher (docs/PLANNER.md \"The autoscaler\"); one controller at a time");
  cmd->add_option("--etcd", a.etcd, "etcd endpoints, comma-separated http(s)://HOST:PORT")->required();
  cmd->add_option("--etcd-ca", a.tls.ca_file, "With https:// --etcd: the CA of etcd's certificate (PEM)");
  cmd->add_option("--etcd-cert", a.tls.cert_file, "With https:// --etcd: this client's certificate (PEM)");
  cmd->add_option("--etcd-key", a.tls.key_file, "With https:// --etcd: the key of --etcd-cert (PEM)");
  cmd->add_option("--gpus", a.gpus, "GPUs to divide when <prefix>/capacity is absent")
      ->required()
      ->check(non_negative());
  cmd->add_option("--policy", a.policy, "throughput (Saxena et al.) or makespan (Saturn; jobs need 'samples')")
      ->check(CLI::IsMember({"throughput", "makespan"}));
  cmd->add_option("--prefix", a.prefix, "The etcd prefix of the queue, capacity, decisions and leader")
      ->capture_default_str();
  cmd->add_option("--id", a.id, "This controller's name in <prefix>/leader and in its decisions (default HOST:PID)");
  cmd->add_option("--lease-ttl", a.lease_ttl_s, "Seconds a crashed controller keeps the lead before a standby takes it")
      ->check(CLI::Range(2, 3600))
      ->capture_default_str();
  cmd->add_option("--retry", a.retry_s, "Seconds before a pass that failed somewhere is tried again")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--time-limit", a.time_limit_s, "makespan: seconds the solver may search")
      ->check(CLI::Range(0.01, 86400.0));
  cmd->add_option("--slots", a.slots, "makespan: time slots of the program")->check(CLI::Range(2, 100000));
  cmd->add_option("--horizon", a.horizon_s,
                  "throughput: weigh moves over this many seconds: a running job whose entry gives move_seconds "
                  "counts any other option at 1 - move_seconds / SECONDS of its samples/s (docs/PLANNER.md)")
      ->check(CLI::Range(1e-3, 1e9));
  cmd->add_flag("--once", a.once, "One pass, then exit (1 when something was not carried out, or another leads)");
  cmd->add_flag("--json", g.json,
                "Print each decision written, and each unreadable queue entry, one JSON object a line");
  return cmd;
}

namespace {

// A queue entry that does not parse: its job keeps its stored decision and the GPUs in it.
struct Unreadable {
  std::string key, error;
  bool stored = false;  // it has a stored decision
  int reserved = 0;     // the GPUs of that decision (0: none stored, or queued)
};

struct Snapshot {
  std::vector<ptc::QueueEntry> queue;                 // in submit order
  std::map<std::string, Unreadable> unreadable;       // by job, left out of the pass
  std::map<std::string, ptc::StoredDecision> stored;  // of the readable entries and of finished jobs
  std::vector<std::string> unreadable_decisions;      // jobs whose stored decision does not parse
  int gpus = 0;                                       // the capacity
  int reserved = 0;                                   // of it, held by the jobs whose entries are unreadable
  int free() const { return std::max(0, gpus - reserved); }
  std::map<std::string, ptc::Decision> decisions() const {  // the stored ones, by job
    std::map<std::string, ptc::Decision> out;
    for (const auto& [job, sd] : stored) out.emplace(job, sd.decision);
    return out;
  }
  int64_t revision = 0;
};

class Controller {
 public:
  Controller(const AutoscaleArgs& a, const Globals& g, std::unique_ptr<EtcdClient> etcd)
      : a_(a), g_(g), etcd_(std::move(etcd)) {}
  int run();

 private:
  std::string key(const std::string& rest) const { return a_.prefix + "/" + rest; }
  ptc::Result<bool> campaign();
  void wait_for_vacancy();
  void lead();
  // One pass: decide and carry out what changed. Whether everything was carried out.
  bool pass(int64_t* revision);
  ptc::Result<Snapshot> read();
  ptc::Result<std::vector<ptc::Decision>> decide(const Snapshot& s);
  ptc::Status carry_out(const ptc::QueueEntry& e, const ptc::Decision& d, std::string* step);
  ptc::Status fenced(const std::vector<EtcdWrite>& writes);
  ptc::Status still_leading();
  // The lease kept alive in a thread while leading (a pass of --once included); lost_ when
  // it is lost, which stops the pass (docs/PLANNER.md "One controller at a time").
  void start_keep_alive();
  void keep_alive_loop();
  void stop_keep_alive();

  const AutoscaleArgs& a_;
  const Globals& g_;
  std::unique_ptr<EtcdClient> etcd_;
  int64_t lease_ = 0;
  int64_t seq_ = 0;
  std::atomic<bool> lost_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread keep_alive_;
};

ptc::Result<bool> Controller::campaign() {
  PTC_ASSIGN_OR_RETURN(lease_, etcd_->grant(a_.lease_ttl_s), "granting a lease in etcd");
  const std::string me = json{{"id", a_.id}, {"lease", lease_}}.dump();
  PTC_ASSIGN_OR_RETURN(bool won,
                       etcd_->txn({EtcdCompare::mod_is(key("leader"), 0)}, {EtcdWrite::put(key("leader"), me, lease_)}),
                       "campaigning for " + key("leader"));
  if (!won) (void)etcd_->revoke(lease_);
  return won;
}

void Controller::wait_for_vacancy() {
  auto held = etcd_->range_prefix(key("leader"));
  if (!held) {
    ptc::log::warn("autoscale: reading {}: {}", key("leader"), held.status().to_string());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return;
  }
  if (held->kvs.empty()) return;
  ptc::log::info("autoscale: standing by; {} holds {}", held->kvs.front().value, key("leader"));
  bool vacated = false;
  auto s = etcd_->watch_prefix(
      key("leader"), held->revision + 1,
      [&](const EtcdEvent& e) { vacated = vacated || (e.deleted && e.kv.key == key("leader")); },
      [&] { return vacated; });
  if (!s) {
    ptc::log::warn("autoscale: watching {}: {}", key("leader"), s.to_string());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

void Controller::start_keep_alive() {
  lost_ = false;
  keep_alive_ = std::thread([this] { keep_alive_loop(); });
}

void Controller::keep_alive_loop() {
  const auto period = std::chrono::milliseconds(a_.lease_ttl_s * 1000 / 3);
  auto last_ok = Clock::now();
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    auto r = etcd_->keep_alive(lease_);
    lock.lock();
    if (r) {
      last_ok = Clock::now();
    } else if (r.status().code() == ptc::Code::kNotFound ||
               Clock::now() - last_ok > std::chrono::milliseconds(a_.lease_ttl_s * 500)) {
      // Half the TTL without a renewal: etcd may expire the lease any moment now, and a standby
      // may lead (as daemons fence themselves, daemon/cluster/etcd_membership.cc).
      ptc::log::error("autoscale: lost the lease of {}: {}", key("leader"), r.status().to_string());
      lost_ = true;
      return;
    }
  }
}

void Controller::stop_keep_alive() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (keep_alive_.joinable()) keep_alive_.join();
  stopping_ = false;
}

ptc::Status Controller::fenced(const std::vector<EtcdWrite>& writes) {
  PTC_ASSIGN_OR_RETURN(bool ok, etcd_->txn({EtcdCompare::lease_is(key("leader"), lease_)}, writes));
  if (!ok) {
    lost_ = true;
    return ptc::unavailable("no longer the leader (" + key("leader") + " is not ours): nothing written");
  }
  return ptc::Status::ok();
}

ptc::Status Controller::still_leading() {
  PTC_ASSIGN_OR_RETURN(auto held, etcd_->get(key("leader")));
  if (!held || held->lease != lease_) {
    lost_ = true;
    return ptc::unavailable("no longer the leader (" + key("leader") + " is not ours)");
  }
  return ptc::Status::ok();
}

ptc::Result<Snapshot> Controller::read() {
  PTC_ASSIGN_OR_RETURN(auto all, etcd_->range_prefix(key("")), "reading " + key(""));
  Snapshot s;
  s.revision = all.revision;
  s.gpus = a_.gpus;
  std::vector<std::pair<int64_t, ptc::QueueEntry>> queued;
  const std::string q = key("queue/"), d = key("decision/");
  for (const auto& kv : all.kvs) {
    if (kv.key == key("capacity")) {
      auto n = ptc::parse_json(kv.value, kv.key);
      if (!n) return n.status();
      PTC_ASSIGN_OR_RETURN(int64_t c, ptc::get_int(*n, kv.key + " (a GPU count)", 0, ptc::kMaxDecisionGpus));
      s.gpus = static_cast<int>(c);
    } else if (kv.key.starts_with(q)) {
      const std::string job = kv.key.substr(q.size());
      auto e = ptc::parse_queue_entry(kv.value, job, kv.key);
      if (e)
        queued.emplace_back(kv.create_revision, std::move(*e));
      else
        s.unreadable[job] = {kv.key, e.status().message(), false, 0};
    } else if (kv.key.starts_with(d)) {
      const std::string job = kv.key.substr(d.size());
      auto sd = ptc::parse_stored_decision(kv.value, job, kv.key);
      if (sd) {
        seq_ = std::max(seq_, sd->seq);
        s.stored.emplace(job, std::move(*sd));
      } else {
        ptc::log::warn("autoscale: {}; decided again", sd.status().message());
        s.unreadable_decisions.push_back(job);
      }
    } else if (kv.key == key("seq")) {
      // The last decision's seq, kept beside the decisions so that it survives their deletion.
      auto n = ptc::parse_json(kv.value, kv.key);
      if (n && n->is_number_integer()) seq_ = std::max(seq_, n->get<int64_t>());
    }
  }
  std::stable_sort(queued.begin(), queued.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (auto& [rev, e] : queued) s.queue.push_back(std::move(e));
  // A later entry naming the store job of an earlier one is left out as unreadable (its
  // decision's GPUs stay reserved, below): two jobs would repartition one step.
  const auto dups = ptc::duplicate_store_jobs(s.queue);
  for (auto it = dups.rbegin(); it != dups.rend(); ++it) {
    const std::string job = s.queue[it->first].spec.name;
    s.unreadable[job] = {q + job, q + job + ": " + it->second, false, 0};
    s.queue.erase(s.queue.begin() + static_cast<std::ptrdiff_t>(it->first));
  }
  // A job whose entry is unreadable may still run on its stored decision: its GPUs are not
  // given to others until the entry is fixed or removed (docs/PLANNER.md "Crashes and errors").
  for (auto& [job, u] : s.unreadable) {
    const auto it = s.stored.find(job);
    if (it != s.stored.end()) {
      u.stored = true;
      u.reserved = it->second.decision.gpus;
      s.reserved += u.reserved;
      s.stored.erase(it);
    }
  }
  return s;
}

void report(const Snapshot& s, const Globals& g) {
  for (const auto& [job, u] : s.unreadable) {
    const std::string kept = !u.stored    ? "is left out"
                             : u.reserved ? fmt::format("keeps its decision and its {} GPUs stay reserved", u.reserved)
                                          : "keeps its decision";
    ptc::log::error("autoscale: unreadable queue entry {}: {}; job '{}' {} until the entry is fixed or removed", u.key,
                    u.error, job, kept);
    if (g.json) {
      fmt::print("{}\n",
                 json{{"unreadable", u.key}, {"job", job}, {"error", u.error}, {"reserved_gpus", u.reserved}}.dump());
      std::fflush(stdout);
    }
  }
}

ptc::Result<std::vector<ptc::Decision>> Controller::decide(const Snapshot& s) {
  if (a_.policy == "throughput") return ptc::decide_throughput(s.queue, s.free(), s.decisions(), a_.horizon_s);
  std::vector<ptc::JobSpec> specs = ptc::autoscale_specs(s.queue);
  const auto options = ptc::fitting_options(specs, s.free());
  specs.resize(options.size());
  if (specs.empty()) return ptc::decisions_from(s.queue, {});
  PTC_ASSIGN_OR_RETURN(auto timed, ptc::timed_options(specs, options), "makespan policy");
  PTC_ASSIGN_OR_RETURN(auto solved, solve_makespan(specs, timed, s.free(), a_.slots, a_.time_limit_s),
                       "makespan policy");
  return ptc::decisions_from(s.queue, ptc::starting_now(solved.schedule));
}

std::string to_text(const ptc::Decision& d) { return fmt::format("tp={},pp={},dp={}", d.tp, d.pp, d.dp); }

ptc::Status Controller::carry_out(const ptc::QueueEntry& e, const ptc::Decision& d, std::string* step) {
  if (d.queued) return ptc::Status::ok();
  Globals g = g_;
  g.daemon = e.daemon;
  auto listed = call(g, {{"op", "ls"}, {"path", e.store_job}});
  if (!listed) {
    if (listed.status().code() == ptc::Code::kNotFound) return ptc::Status::ok();  // nothing saved yet
    return listed.status().with_context("listing job '" + e.store_job + "' at " + e.daemon);
  }
  // The committed steps: a save still pending (being written, or left half written) is no step.
  std::vector<std::string> steps, pending;
  for (const auto& st : listed->value("pending", json::array())) pending.push_back(st.get<std::string>());
  for (const auto& st : listed->value("steps", json::array()))
    if (std::find(pending.begin(), pending.end(), st.get<std::string>()) == pending.end())
      steps.push_back(st.get<std::string>());
  const auto latest = ptc::latest_step(steps);
  if (!latest) return ptc::Status::ok();
  PTC_RETURN_IF_ERROR(still_leading());
  // The tensors only (and the datasets' dp with them): the decision's global batch is the
  // launcher's to apply when it starts the job at it (docs/PLANNER.md "The autoscaler"), since
  // re-splitting the datasets' batch under a segment still running at the old one would refuse
  // that segment's progress.
  const json req = {
      {"op", "repartition"}, {"job", e.store_job}, {"step", *latest}, {"to", to_text(d)}, {"dry_run", false}};
  auto r = call(g, req);
  if (!r)
    return r.status().with_context("repartitioning " + e.store_job + "/" + *latest + " at " + e.daemon + " to " +
                                   to_text(d));
  ptc::log::info("autoscale: {}/{} at {}: {}", e.store_job, *latest, e.daemon,
                 r->value("unchanged", false) ? "already " + to_text(d) : "repartitioned to " + to_text(d));
  *step = *latest;
  return ptc::Status::ok();
}

bool Controller::pass(int64_t* revision) {
  auto snap = read();
  if (!snap) {
    ptc::log::error("autoscale: {}; no change made", snap.status().message());
    return false;
  }
  *revision = snap->revision;
  report(*snap, g_);
  auto next = decide(*snap);
  if (!next) {
    ptc::log::error("autoscale: deciding {} jobs on {} GPUs: {}; no change made", snap->queue.size(), snap->free(),
                    next.status().message());
    return false;
  }
  ptc::Changes ch = ptc::changes(*next, snap->decisions());
  // A finished job's decision that does not parse goes too (a queued job's is written anew).
  for (const auto& job : snap->unreadable_decisions)
    if (std::none_of(next->begin(), next->end(), [&](const ptc::Decision& d) { return d.job == job; }) &&
        !snap->unreadable.count(job))
      ch.finished.push_back(job);
  ptc::log::info("autoscale: pass at revision {}: {} jobs on {} GPUs ({}), {} decisions to change, {} to remove",
                 snap->revision, snap->queue.size(), snap->free(), a_.policy, ch.changed.size(), ch.finished.size());
  bool complete = true;
  for (const auto& job : ch.finished) {
    auto s = fenced({EtcdWrite::erase(key("decision/" + job))});
    if (!s) {
      ptc::log::error("autoscale: removing the decision of finished job '{}': {}", job, s.message());
      complete = false;
    } else {
      ptc::log::info("autoscale: job '{}' left the queue; its decision removed", job);
    }
  }
  // The shrinks first, side by side, then the grows, side by side: a grow waits until every
  // shrink that frees GPUs for it went through. A daemon that does not answer costs a pass one
  // connect deadline, not one per job behind it; the decisions are written in the queue's order.
  const auto entry = [&](const ptc::Decision& d) -> const ptc::QueueEntry& {
    return *std::find_if(snap->queue.begin(), snap->queue.end(),
                         [&](const ptc::QueueEntry& e) { return e.spec.name == d.job; });
  };
  const auto record = [&](const ptc::Decision& d, ptc::Status s, const std::string& step) {
    if (s && lost_) s = ptc::unavailable("no longer the leader");
    if (s) {
      const ptc::StoredDecision out{d, step, ++seq_, a_.id};
      const std::string text = ptc::stored_decision_json(out);
      s = fenced({EtcdWrite::put(key("decision/" + d.job), text), EtcdWrite::put(key("seq"), std::to_string(out.seq))});
      if (s) {
        ptc::log::info("autoscale: decision {} for '{}': {}", out.seq, d.job,
                       d.queued ? std::string("waits") : fmt::format("{} GPUs, {}", d.gpus, to_text(d)));
        if (g_.json) {
          fmt::print("{}\n", text);
          std::fflush(stdout);
        }
        return true;
      }
    }
    ptc::log::error("autoscale: job '{}' not changed: {}; tried again later", d.job, s.message());
    return false;
  };
  const auto carry_out_all = [&](size_t lo, size_t hi) {
    struct Done {
      ptc::Status status;
      std::string step;
    };
    std::vector<std::future<Done>> running;
    for (size_t i = lo; i < hi; ++i)
      running.push_back(std::async(std::launch::async, [&, i] {
        Done d;
        d.status =
            lost_ ? ptc::unavailable("no longer the leader") : carry_out(entry(ch.changed[i]), ch.changed[i], &d.step);
        return d;
      }));
    bool all = true;
    for (size_t i = lo; i < hi; ++i) {
      Done d = running[i - lo].get();
      all = record(ch.changed[i], std::move(d.status), d.step) && all;
    }
    return all;
  };
  if (!carry_out_all(0, ch.shrinks)) {
    complete = false;
    for (size_t i = ch.shrinks; i < ch.changed.size(); ++i)
      ptc::log::warn("autoscale: job '{}' not changed: it waits until the jobs giving up GPUs have; tried again later",
                     ch.changed[i].job);
  } else if (!carry_out_all(ch.shrinks, ch.changed.size())) {
    complete = false;
  }
  if (lost_) return false;
  return complete;
}

void Controller::lead() {
  start_keep_alive();
  while (!lost_) {
    int64_t revision = 0;
    const bool complete = pass(&revision);
    const auto retry_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(a_.retry_s * 1000));
    if (revision == 0) {
      std::this_thread::sleep_until(retry_at);
      continue;
    }
    bool dirty = false;
    auto on_event = [&](const EtcdEvent& e) {
      const std::string& k = e.kv.key;
      if (k.starts_with(key("queue/")) || k == key("capacity")) dirty = true;
      if (k == key("leader") && (e.deleted || e.kv.lease != lease_)) lost_ = true;
    };
    auto stop = [&] { return dirty || lost_ || (!complete && Clock::now() >= retry_at); };
    auto s = etcd_->watch_prefix(key(""), revision + 1, on_event, stop);
    if (!s && !stop()) {
      ptc::log::warn("autoscale: watching {}: {}; reading again", key(""), s.to_string());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  stop_keep_alive();
  ptc::log::warn("autoscale: {} no longer leads; campaigning again", a_.id);
}

int Controller::run() {
  while (true) {
    auto won = campaign();
    if (!won) {
      if (a_.once) return fail(won.status());
      ptc::log::error("autoscale: {}; trying again", won.status().message());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    if (!*won) {
      if (a_.once) {
        auto held = etcd_->get(key("leader"));
        const std::string who = held && *held ? (*held)->value : std::string("another controller");
        return fail(ptc::unavailable(who + " holds " + key("leader") + "; nothing done"));
      }
      wait_for_vacancy();
      continue;
    }
    ptc::log::info("autoscale: {} leads {} (lease {} s)", a_.id, a_.prefix, a_.lease_ttl_s);
    if (a_.once) {
      start_keep_alive();
      int64_t revision = 0;
      const bool complete = pass(&revision);
      stop_keep_alive();
      if (lost_)
        return fail(ptc::unavailable(a_.id + " lost the lead of " + key("leader") +
                                     " during its pass; what was left of it not done"));
      (void)etcd_->revoke(lease_);
      return complete ? 0 : 1;
    }
    lead();
  }
}

}  // namespace

int run_autoscale(const AutoscaleArgs& args, const Globals& g) {
  AutoscaleArgs a = args;
  if (a.prefix.empty() || a.prefix.back() == '/') return fail(ptc::invalid("--prefix must not be empty or end in '/'"));
  if (a.horizon_s > 0 && a.policy != "throughput")
    return fail(ptc::invalid("--horizon weighs moves for --policy throughput; the makespan program plans whole runs"));
  if (a.id.empty()) {
    char host[256] = {};
    (void)gethostname(host, sizeof host - 1);
    a.id = fmt::format("{}:{}", host, getpid());
  }
  auto etcd = EtcdClient::make(a.etcd, std::chrono::seconds(2), a.tls);
  if (!etcd) return fail(etcd.status());
  Controller c(a, g, std::move(*etcd));
  return c.run();
}

}  // namespace ptcfs::cli
