#include "cli/autoscale/controller.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "ptc/base/json_util.h"
#include "ptc/base/log.h"

namespace ptcfs::cli {

using nlohmann::json;
using transport::EtcdCompare;
using transport::EtcdEvent;
using transport::EtcdWrite;
using Clock = std::chrono::steady_clock;

namespace {
std::string to_text(const planner::Decision& d) { return fmt::format("tp={},pp={},dp={}", d.tp, d.pp, d.dp); }
}  // namespace

int Snapshot::free() const { return std::max(0, gpus - reserved); }

std::map<std::string, planner::Decision> Snapshot::decisions() const {
  std::map<std::string, planner::Decision> out;
  for (const auto& [job, sd] : stored) out.emplace(job, sd.decision);
  return out;
}

Controller::Controller(ControllerOptions options, std::unique_ptr<transport::EtcdClient> etcd, Decide decide, Call call,
                       Print print)
    : o_(std::move(options)),
      etcd_(std::move(etcd)),
      decide_(std::move(decide)),
      call_(std::move(call)),
      print_(std::move(print)) {}

Controller::~Controller() { drop_lease(); }

Result<bool> Controller::campaign() {
  PTC_ASSIGN_OR_RETURN(lease_, etcd_->grant(o_.lease_ttl_s), "granting a lease in etcd");
  const std::string me = json{{"id", o_.id}, {"lease", lease_}}.dump();
  PTC_ASSIGN_OR_RETURN(bool won,
                       etcd_->txn({EtcdCompare::mod_is(key("leader"), 0)}, {EtcdWrite::put(key("leader"), me, lease_)}),
                       "campaigning for " + key("leader"));
  if (!won) (void)etcd_->revoke(lease_);
  return won;
}

void Controller::wait_for_vacancy() {
  auto held = etcd_->range_prefix(key("leader"));
  if (!held) {
    log::warn("autoscale: reading {}: {}", key("leader"), held.status().to_string());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return;
  }
  if (held->kvs.empty()) return;
  log::info("autoscale: standing by; {} holds {}", held->kvs.front().value, key("leader"));
  bool vacated = false;
  auto s = etcd_->watch_prefix(
      key("leader"), held->revision + 1,
      [&](const EtcdEvent& e) { vacated = vacated || (e.deleted && e.kv.key == key("leader")); },
      [&] { return vacated || stopping_.load(); });
  if (!s && !stopping_) {
    log::warn("autoscale: watching {}: {}", key("leader"), s.to_string());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

void Controller::keep_lease() {
  lost_ = false;
  transport::LeaseKeeper::Hooks hooks;
  hooks.lease = [this] { return lease_; };
  // A lease that expired is the lead gone: a standby may lead by now.
  hooks.lost = [this](const Status& why) {
    log::error("autoscale: lost the lease of {}: {}", key("leader"), why.to_string());
    lost_ = true;
    return false;
  };
  keeper_ = std::make_unique<transport::LeaseKeeper>(*etcd_, o_.lease_ttl_s, std::move(hooks));
}

void Controller::drop_lease() {
  if (keeper_) keeper_->stop();
  keeper_.reset();
}

Status Controller::fenced(const std::vector<EtcdWrite>& writes) {
  PTC_ASSIGN_OR_RETURN(bool ok, etcd_->txn({EtcdCompare::lease_is(key("leader"), lease_)}, writes));
  if (!ok) {
    lost_ = true;
    return unavailable("no longer the leader (" + key("leader") + " is not ours): nothing written");
  }
  return Status::ok();
}

Status Controller::still_leading() {
  PTC_ASSIGN_OR_RETURN(auto held, etcd_->get(key("leader")));
  if (!held || held->lease != lease_) {
    lost_ = true;
    return unavailable("no longer the leader (" + key("leader") + " is not ours)");
  }
  return Status::ok();
}

Result<Snapshot> Controller::read() {
  PTC_ASSIGN_OR_RETURN(auto all, etcd_->range_prefix(key("")), "reading " + key(""));
  Snapshot s;
  s.revision = all.revision;
  s.gpus = o_.gpus;
  std::vector<std::pair<int64_t, planner::QueueEntry>> queued;
  const std::string q = key("queue/"), d = key("decision/");
  for (const auto& kv : all.kvs) {
    if (kv.key == key("capacity")) {
      auto n = parse_json(kv.value, kv.key);
      if (!n) return n.status();
      PTC_ASSIGN_OR_RETURN(int64_t c, get_int(*n, kv.key + " (a GPU count)", 0, planner::kMaxDecisionGpus));
      s.gpus = static_cast<int>(c);
    } else if (kv.key.starts_with(q)) {
      const std::string job = kv.key.substr(q.size());
      auto e = planner::parse_queue_entry(kv.value, job, kv.key);
      if (e)
        queued.emplace_back(kv.create_revision, std::move(*e));
      else
        s.unreadable[job] = {kv.key, e.status().message(), false, 0};
    } else if (kv.key.starts_with(d)) {
      const std::string job = kv.key.substr(d.size());
      auto sd = planner::parse_stored_decision(kv.value, job, kv.key);
      if (sd) {
        seq_ = std::max(seq_, sd->seq);
        s.stored.emplace(job, std::move(*sd));
      } else {
        log::warn("autoscale: {}; decided again", sd.status().message());
        s.unreadable_decisions.push_back(job);
      }
    } else if (kv.key == key("seq")) {
      // The last decision's seq, kept beside the decisions so that it survives their deletion.
      auto n = parse_json(kv.value, kv.key);
      if (n && n->is_number_integer()) seq_ = std::max(seq_, n->get<int64_t>());
    }
  }
  std::stable_sort(queued.begin(), queued.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (auto& [rev, e] : queued) s.queue.push_back(std::move(e));
  // A later entry naming the store job of an earlier one is left out as unreadable (its
  // decision's GPUs stay reserved, below): two jobs would repartition one step.
  const auto dups = planner::duplicate_store_jobs(s.queue);
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

void Controller::report(const Snapshot& s) {
  for (const auto& [job, u] : s.unreadable) {
    const std::string kept = !u.stored    ? "is left out"
                             : u.reserved ? fmt::format("keeps its decision and its {} GPUs stay reserved", u.reserved)
                                          : "keeps its decision";
    log::error("autoscale: unreadable queue entry {}: {}; job '{}' {} until the entry is fixed or removed", u.key,
               u.error, job, kept);
    if (print_)
      print_(json{{"unreadable", u.key}, {"job", job}, {"error", u.error}, {"reserved_gpus", u.reserved}}.dump());
  }
}

Status Controller::carry_out(const planner::QueueEntry& e, const planner::Decision& d, std::string* step) {
  if (d.queued) return Status::ok();
  auto listed = call_(e.daemon, {{"op", "ls"}, {"path", e.store_job}});
  if (!listed) {
    if (listed.status().code() == Code::kNotFound) return Status::ok();  // nothing saved yet
    return listed.status().with_context("listing job '" + e.store_job + "' at " + e.daemon);
  }
  // The committed steps: a save still pending (being written, or left half written) is no step.
  std::vector<std::string> steps, pending;
  for (const auto& st : listed->value("pending", json::array())) pending.push_back(st.get<std::string>());
  for (const auto& st : listed->value("steps", json::array()))
    if (std::find(pending.begin(), pending.end(), st.get<std::string>()) == pending.end())
      steps.push_back(st.get<std::string>());
  const auto latest = planner::latest_step(steps);
  if (!latest) return Status::ok();
  PTC_RETURN_IF_ERROR(still_leading());
  // The tensors only (and the datasets' dp with them): the decision's global batch is the
  // launcher's to apply when it starts the job at it (docs/PLANNER.md "The autoscaler"), since
  // re-splitting the datasets' batch under a segment still running at the old one would refuse
  // that segment's progress.
  const json req = {
      {"op", "repartition"}, {"job", e.store_job}, {"step", *latest}, {"to", to_text(d)}, {"dry_run", false}};
  auto r = call_(e.daemon, req);
  if (!r)
    return r.status().with_context("repartitioning " + e.store_job + "/" + *latest + " at " + e.daemon + " to " +
                                   to_text(d));
  log::info("autoscale: {}/{} at {}: {}", e.store_job, *latest, e.daemon,
            r->value("unchanged", false) ? "already " + to_text(d) : "repartitioned to " + to_text(d));
  *step = *latest;
  return Status::ok();
}

bool Controller::record(const planner::Decision& d, Status s, const std::string& step) {
  if (s && lost_) s = unavailable("no longer the leader");
  if (s) {
    const planner::StoredDecision out{d, step, ++seq_, o_.id};
    const std::string text = planner::stored_decision_json(out);
    s = fenced({EtcdWrite::put(key("decision/" + d.job), text), EtcdWrite::put(key("seq"), std::to_string(out.seq))});
    if (s) {
      log::info("autoscale: decision {} for '{}': {}", out.seq, d.job,
                d.queued ? std::string("waits") : fmt::format("{} GPUs, {}", d.gpus, to_text(d)));
      if (print_) print_(text);
      return true;
    }
  }
  log::error("autoscale: job '{}' not changed: {}; tried again later", d.job, s.message());
  return false;
}

bool Controller::pass(int64_t* revision) {
  auto snap = read();
  if (!snap) {
    log::error("autoscale: {}; no change made", snap.status().message());
    return false;
  }
  *revision = snap->revision;
  report(*snap);
  auto next = decide_(snap->queue, snap->free(), snap->decisions());
  if (!next) {
    log::error("autoscale: deciding {} jobs on {} GPUs: {}; no change made", snap->queue.size(), snap->free(),
               next.status().message());
    return false;
  }
  planner::Changes ch = planner::changes(*next, snap->decisions());
  // A finished job's decision that does not parse goes too (a queued job's is written anew).
  for (const auto& job : snap->unreadable_decisions)
    if (std::none_of(next->begin(), next->end(), [&](const planner::Decision& d) { return d.job == job; }) &&
        !snap->unreadable.count(job))
      ch.finished.push_back(job);
  log::info("autoscale: pass at revision {}: {} jobs on {} GPUs ({}), {} decisions to change, {} to remove",
            snap->revision, snap->queue.size(), snap->free(), o_.policy, ch.changed.size(), ch.finished.size());
  bool complete = true;
  for (const auto& job : ch.finished) {
    auto s = fenced({EtcdWrite::erase(key("decision/" + job))});
    if (!s) {
      log::error("autoscale: removing the decision of finished job '{}': {}", job, s.message());
      complete = false;
    } else {
      log::info("autoscale: job '{}' left the queue; its decision removed", job);
    }
  }
  // The shrinks first, side by side, then the grows, side by side: a grow waits until every
  // shrink that frees GPUs for it went through. A daemon that does not answer costs a pass one
  // connect deadline, not one per job behind it; the decisions are written in the queue's order.
  const auto entry = [&](const planner::Decision& d) -> const planner::QueueEntry& {
    return *std::find_if(snap->queue.begin(), snap->queue.end(),
                         [&](const planner::QueueEntry& e) { return e.spec.name == d.job; });
  };
  const auto carry_out_all = [&](size_t lo, size_t hi) {
    struct Done {
      Status status;
      std::string step;
    };
    std::vector<std::future<Done>> running;
    for (size_t i = lo; i < hi; ++i)
      running.push_back(std::async(std::launch::async, [&, i] {
        Done d;
        d.status =
            lost_ ? unavailable("no longer the leader") : carry_out(entry(ch.changed[i]), ch.changed[i], &d.step);
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
      log::warn("autoscale: job '{}' not changed: it waits until the jobs giving up GPUs have; tried again later",
                ch.changed[i].job);
  } else if (!carry_out_all(ch.shrinks, ch.changed.size())) {
    complete = false;
  }
  if (lost_) return false;
  return complete;
}

void Controller::lead() {
  keep_lease();
  while (!lost_ && !stopping_) {
    int64_t revision = 0;
    const bool complete = pass(&revision);
    const auto retry_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o_.retry_s * 1000));
    if (revision == 0) {
      while (Clock::now() < retry_at && !stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    bool dirty = false;
    auto on_event = [&](const EtcdEvent& e) {
      const std::string& k = e.kv.key;
      if (k.starts_with(key("queue/")) || k == key("capacity")) dirty = true;
      if (k == key("leader") && (e.deleted || e.kv.lease != lease_)) lost_ = true;
    };
    auto stop = [&] { return dirty || lost_ || stopping_ || (!complete && Clock::now() >= retry_at); };
    auto s = etcd_->watch_prefix(key(""), revision + 1, on_event, stop);
    if (!s && !stop()) {
      log::warn("autoscale: watching {}: {}; reading again", key(""), s.to_string());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  drop_lease();
  if (stopping_) {
    (void)etcd_->revoke(lease_);
    return;
  }
  log::warn("autoscale: {} no longer leads; campaigning again", o_.id);
}

Result<bool> Controller::once() {
  PTC_ASSIGN_OR_RETURN(const bool won, campaign());
  if (!won) {
    auto held = etcd_->get(key("leader"));
    const std::string who = held && *held ? (*held)->value : std::string("another controller");
    return unavailable(who + " holds " + key("leader") + "; nothing done");
  }
  log::info("autoscale: {} leads {} (lease {} s)", o_.id, o_.prefix, o_.lease_ttl_s);
  keep_lease();
  int64_t revision = 0;
  const bool complete = pass(&revision);
  drop_lease();
  if (lost_)
    return unavailable(o_.id + " lost the lead of " + key("leader") + " during its pass; what was left of it not done");
  (void)etcd_->revoke(lease_);
  return complete;
}

void Controller::serve() {
  while (!stopping_) {
    auto won = campaign();
    if (!won) {
      log::error("autoscale: {}; trying again", won.status().message());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    if (!*won) {
      wait_for_vacancy();
      continue;
    }
    log::info("autoscale: {} leads {} (lease {} s)", o_.id, o_.prefix, o_.lease_ttl_s);
    lead();
  }
}

}  // namespace ptcfs::cli
