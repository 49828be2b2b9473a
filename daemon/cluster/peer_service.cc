#include "daemon/cluster/peer_service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/slab_read.h"
#include "daemon/dataset/dataset_ops.h"
#include "daemon/reshard/importer.h"
#include "daemon/store/checksum.h"
#include "daemon/store/failpoint.h"
#include "daemon/store/prepared_record.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"

namespace ptcfs {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxPeerRead = 64 << 20;
// How long a peer read waits for a version this node has not committed yet (PeerService::read).
constexpr auto kBehindWait = std::chrono::seconds(2);

// "{node}" in an import directory is this node's id.
std::string node_dir(std::string dir, const std::string& id) {
  for (size_t at; (at = dir.find("{node}")) != std::string::npos;) dir.replace(at, 6, id);
  return dir;
}

// The record that decides a change of this kind.
std::string record_key(const PrepareRequest& r) {
  return std::visit(
      [](const auto& c) -> std::string {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, DatasetAddChange> || std::is_same_v<T, DatasetProgressChange>)
          return etcd_dataset_key(c.job, c.name);
        else
          return etcd_step_key(c.job, c.step);
      },
      r.change);
}

constexpr size_t kRememberCommitted = 256;

// The job a change is of, and whether it may change that job's datasets (a progress; a
// repartition, which re-splits them).
std::pair<std::string, bool> dataset_change_of(const PrepareRequest& r) {
  return std::visit(
      [](const auto& c) -> std::pair<std::string, bool> {
        using T = std::decay_t<decltype(c)>;
        return {c.job, std::is_same_v<T, DatasetProgressChange> || std::is_same_v<T, RepartitionChange>};
      },
      r.change);
}

// A repartition re-splits on this node the datasets, at the versions, that the coordinator
// re-split: else the nodes would serve different splits after it (a node catching up on a
// progress it missed has another version).
ptc::Status same_datasets(const RepartitionChange& c, const std::vector<DatasetChange>& here) {
  if (!c.datasets) return ptc::Status::ok();  // a coordinator of an older build
  const std::map<std::string, uint64_t>& want = *c.datasets;
  const std::map<std::string, uint64_t> have = resplit_versions(here);
  if (have == want) return ptc::Status::ok();
  const auto text = [](const std::map<std::string, uint64_t>& m) {
    std::string out;
    for (const auto& [name, version] : m)
      out += (out.empty() ? "" : ", ") + name + " version " + std::to_string(version);
    return out.empty() ? std::string("none") : out;
  };
  return ptc::error(ptc::Code::kFailedPrecondition, "the datasets of job '" + c.job + "' to re-split differ: here " +
                                                        text(have) + ", at the coordinator " + text(want) +
                                                        " (a node catching up; try again in a moment)");
}

}  // namespace

std::string PeerService::id() const { return node_id(*peers_.cluster(), self_); }

void PeerService::hold(const std::string& tx, PreparedChange change, const std::string& key) {
  std::lock_guard lock(mu_);
  prepared_.emplace(tx, Held{std::move(change), key, id(), members_.lease(), std::chrono::steady_clock::now()});
}

bool PeerService::commit_decided(const std::string& tx) {
  {
    std::lock_guard lock(mu_);
    if (std::find(committed_.begin(), committed_.end(), tx) != committed_.end()) return true;
    if (!prepared_.count(tx) && !committing_.count(tx)) {
      if (std::find(recorded_.begin(), recorded_.end(), tx) == recorded_.end()) {
        recorded_.push_back(tx);
        if (recorded_.size() > kRememberCommitted) recorded_.pop_front();
      }
      return false;
    }
  }
  auto s = finish(tx, true);  // commits it, or waits for the commit under way (the coordinator's peer.commit)
  if (!s) ptc::log::error("committing transaction {} recorded in etcd: {}", tx, s.to_string());
  return s.is_ok();
}

void PeerService::drop_superseded(const std::string& key, const std::string& tx, uint64_t version, bool removed,
                                  std::chrono::seconds held) {
  // The version a change makes of its record: its step's, or, for a change of a dataset alone
  // (a progress), that dataset's.
  const auto makes = [](const PreparedChange& c) -> uint64_t {
    if (c.next) return c.next->version();
    return c.datasets.size() == 1 ? c.datasets.front().next->version() : 0;
  };
  std::vector<std::string> lost;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [t, h] : prepared_)
      if (h.key == key && t != tx && now - h.since >= held &&
          (removed || (makes(h.change) != 0 && version >= makes(h.change))))
        lost.push_back(t);
  }
  for (const auto& t : lost) {
    if (tx.empty())
      ptc::log::warn(
          "the change prepared for {} (transaction {}) was decided without this node: the others are at "
          "version {}; aborted here, caught up instead",
          key, t, version);
    else
      ptc::log::warn(
          "the change prepared for {} (transaction {}) can never commit: etcd records {} by transaction {}; "
          "aborted",
          key, t, removed ? "a removal" : "version " + std::to_string(version), tx);
    (void)finish(t, false);
  }
}

void PeerService::restore() {
  auto kept = restore_prepared(store_);
  const bool decidable = members_.lease() != 0;
  for (auto& k : kept) {
    // Who decides it, as keep_prepared wrote it; anything else is decided by nobody: dropped.
    const std::string w = "kept change " + k.tx;
    auto lease = k.about.is_object() && k.about.contains("lease") ? ptc::get_int(k.about["lease"], w + " lease")
                                                                  : ptc::Result<int64_t>(int64_t{0});
    Held h{std::move(k.change),
           ptc::member_string_or(k.about, "key", "", w).value_or(""),
           ptc::member_string_or(k.about, "coordinator", "", w).value_or(""),
           lease.value_or(0),
           std::chrono::steady_clock::now(),
           true};
    if (!decidable || h.key.empty() || h.lease == 0) {
      ptc::log::warn("dropping {} kept from before the restart (transaction {}): without etcd nothing decides it",
                     describe(h.change), k.tx);
      abort_change(store_, h.change);
      forget_prepared(store_, k.tx);
      continue;
    }
    std::lock_guard lock(mu_);
    prepared_.emplace(k.tx, std::move(h));
  }
}

size_t PeerService::expire(std::chrono::seconds max_age) {
  leases_.expire();
  std::vector<std::tuple<std::string, std::string, std::string, bool>> due;  // tx, key, coordinator, lease ended
  {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mu_);
    for (const auto& [tx, h] : prepared_) {
      const bool lease_ended = h.lease != 0 && !members_.lease_alive(h.coordinator, h.lease);
      if (lease_ended || now - h.since > max_age) due.emplace_back(tx, h.key, h.coordinator, lease_ended);
    }
  }
  size_t dropped = 0;
  for (const auto& [tx, key, coordinator, lease_ended] : due) {
    // A lease that ended cannot commit any more: the record now says for good whether the
    // coordinator committed before it died.
    if (lease_ended) {
      auto rec = members_.read(key);
      if (!rec) continue;  // etcd is unreachable: decide later
      if (written_by(key, rec->value, tx)) {
        if (auto s = finish(tx, true); !s) ptc::log::error("committing transaction {}: {}", tx, s.to_string());
        continue;
      }
    }
    ptc::log::warn("dropping the change prepared for {} by node {} (transaction {}): {}", key, coordinator, tx,
                   lease_ended ? "that node's lease ended before it committed" : "it waited too long for a decision");
    (void)finish(tx, false);
    ++dropped;
  }
  return dropped;
}

// One row per peer operation: its name and its handler (which decodes the request).
struct PeerService::Op {
  const char* name;
  ptc::Result<transport::Reply> (PeerService::*handler)(const json& req);
};

const PeerService::Op PeerService::kOps[] = {
    {"peer.read", &PeerService::read},
    {"peer.samples", &PeerService::serve_samples},
    {"peer.dataset_table", &PeerService::serve_table},
    {"peer.state", &PeerService::state},
    {"peer.save_state", &PeerService::save_state},
    {"peer.save_ready", &PeerService::save_ready},
    {"peer.dcp_files", &PeerService::dcp_files},
    {"peer.dcp_read", &PeerService::dcp_read},
    {"peer.dcp_convert", &PeerService::dcp_convert},
    {"peer.dataset_state", &PeerService::dataset_state},
    {"peer.stats", &PeerService::stats},
    {"peer.prepare", &PeerService::prepare},
    {"peer.commit", &PeerService::commit},
    {"peer.abort", &PeerService::abort},
};

ptc::Result<transport::Reply> PeerService::handle(const json& req) {
  PTC_ASSIGN_OR_RETURN(const std::string op, ptc::member_string(req, "op", "peer request"));
  for (const Op& o : kOps) {
    if (op != o.name) continue;
    auto r = (this->*o.handler)(req);
    // Refused reads are logged here (the reader names the node; this side names the request).
    if (!r && (o.handler == &PeerService::serve_samples || o.handler == &PeerService::serve_table))
      ptc::log::warn("refused {}: {}", op, r.status().to_string());
    return r;
  }
  return ptc::invalid("unknown peer operation '" + op + "'");
}

namespace {

// Whether this node serves an older version of the step than `version` (or none of it): the
// asker saw a commit this node has not applied yet.
bool behind(const Store& store, const ReadRequest& req) {
  const auto snap = store.snapshot();
  const auto it = snap->steps.find({req.job, req.step});
  return it == snap->steps.end() || it->second->version() < req.version;
}

}  // namespace

ptc::Result<transport::Reply> PeerService::read(const json& j) {
  auto req = read_request_from_json(j);
  auto r = req ? serve_slab_read(store_, *req, kMaxPeerRead, &digests_, &leases_)
               : ptc::Result<transport::Reply>(req.status());
  // A version the asker has committed and this node not yet (a node just restarted, whose kept
  // prepared change waits for its record, or one catching up) comes within moments: wait for it
  // rather than fail a reader's file (ENOENT) for a version that exists.
  if (req && !r && r.status().code() == ptc::Code::kNotFound && behind(store_, *req)) {
    const auto until = std::chrono::steady_clock::now() + kBehindWait;
    while (!r && r.status().code() == ptc::Code::kNotFound && std::chrono::steady_clock::now() < until &&
           behind(store_, *req)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      r = serve_slab_read(store_, *req, kMaxPeerRead, &digests_, &leases_);
    }
  }
  if (r) {
    sent_ += r->payload.size;
    ptc::metrics::peer_sent(req->from, r->payload.size);
  } else {
    ptc::log::warn("refused a peer read: {}", r.status().to_string());
  }
  return r;
}

ptc::Result<transport::Reply> PeerService::stats(const json& req) {
  PTC_RETURN_IF_ERROR(stats_request_from_json(req).status());
  return transport::Reply(to_json(PeerStats{sent_.load(), peers_.bytes_received()}));
}

ptc::Result<transport::Reply> PeerService::state(const json& j) {
  PTC_ASSIGN_OR_RETURN(const StateRequest req, state_request_from_json(j));
  auto snap = store_.snapshot();
  auto it = snap->steps.find({req.job, req.step});
  if (it == snap->steps.end()) return ptc::not_found("no step " + req.job + "/" + req.step + " on node " + id());
  const StepVersion& v = *it->second;
  StepState s{v.version(), v.placement().nodes, v.placement().gpus, {}, v.layout().ptc(), v.placement().holders};
  for (const auto& sh : v.layout().shards())
    if (v.holds(sh)) s.held.push_back(sh.name());
  return transport::Reply(to_json(s));
}

ptc::Result<PreparedChange> PeerService::prepare_import(const ImportChange& c, PrepareReply& reply) {
  ImportSummary sum;
  ptc::Ptc seen;
  auto place = [&](const ptc::Layout& layout) -> ptc::Result<StepPlacement> {
    seen = layout.ptc();
    // Pinned as the coordinator saw them (a node's own view if it sent none).
    const std::vector<int> gpus = c.gpus.empty() ? ptc::gpus_of(*peers_.cluster(), c.nodes) : c.gpus;
    PTC_ASSIGN_OR_RETURN(auto holders, ptc::shard_nodes_on(layout, *peers_.cluster(), c.nodes, gpus));
    StepPlacement p{c.nodes, gpus, {}, {}};
    for (const auto& h : holders) p.held.push_back(std::find(h.begin(), h.end(), self_) != h.end());
    return p;
  };
  PTC_ASSIGN_OR_RETURN(PreparedChange change,
                       ptcfs::prepare_import(store_, node_dir(c.dir, id()), c.job, c.step, place, sum));
  const std::string text = ptc::ptc_to_json(seen);
  reply.shards = sum.shards;
  reply.bytes = sum.bytes;
  reply.ptc_digest = xxh3_of(text.data(), text.size());
  reply.tensors = seen.tensors.size();
  return change;
}

ptc::Result<transport::Reply> PeerService::prepare(const json& j) {
  PTC_ASSIGN_OR_RETURN(PrepareRequest req, prepare_request_from_json(j));
  // A fenced node answers, so it refuses (kFailedPrecondition): were it kUnavailable, a change
  // that leaves out unreachable nodes (dataset progress) would succeed without it while it goes
  // on serving the old state (docs/ARCHITECTURE.md "What holds under faults").
  if (auto fenced = members_.can_change(); !fenced) return ptc::error(ptc::Code::kFailedPrecondition, fenced.message());
  auto aborted_meanwhile = [&] {
    return ptc::error(ptc::Code::kFailedPrecondition, "node " + id() + ": transaction " + req.tx +
                                                          " was aborted by its coordinator before this node had "
                                                          "prepared it");
  };
  {
    std::lock_guard lock(mu_);
    if (prepared_.count(req.tx))
      return ptc::error(ptc::Code::kAlreadyExists, "transaction " + req.tx + " is already prepared");
    if (std::find(aborted_.begin(), aborted_.end(), req.tx) != aborted_.end()) return aborted_meanwhile();
  }
  PrepareReply reply;
  ptc::Result<PreparedChange> change = ptc::internal("no change");
  if (const auto* c = std::get_if<ImportChange>(&req.change)) {
    members_.learn(c->nodes);
    change = prepare_import(*c, reply);
  } else if (const auto* c = std::get_if<RepartitionChange>(&req.change)) {
    std::vector<std::string> ids = c->to_nodes;
    ids.insert(ids.end(), c->from_nodes.begin(), c->from_nodes.end());
    for (const auto& h : c->from_holders) ids.insert(ids.end(), h.begin(), h.end());
    members_.learn(ids);
    // The job's datasets follow its dp, in the same commit, re-split from the versions the
    // coordinator re-split and claimed before the part is prepared (its pulls take a while):
    // no other change of them is prepared here until this one is decided.
    auto datasets = resplit_datasets(store_, c->job, c->to.dp, c->global_batch);
    if (!datasets) return datasets.status().with_context("node " + id());
    PreparedChange held(store_);
    held.datasets = std::move(datasets).value();
    ptc::Status ready = same_datasets(*c, held.datasets);
    if (ready) ready = held.claim_datasets(store_);
    change = ready ? prepare_repartition_part(store_, peers_, self_, *c, options_) : ptc::Result<PreparedChange>(ready);
    if (change) {
      change->datasets = std::move(held.datasets);
      for (Claim& claim : held.claims) change->claims.push_back(std::move(claim));
      reply.bytes_received = change->bytes_received;
    }
  } else if (const auto* c = std::get_if<DatasetAddChange>(&req.change)) {
    change = prepare_dataset_add(req.tx, *c);
  } else if (const auto* c = std::get_if<DatasetProgressChange>(&req.change)) {
    change = prepare_dataset_progress(store_, c->job, c->name, c->epoch, c->consumed, c->from_version, c->dp,
                                      c->global_batch, c->batch_offset);
    if (change)
      if (auto s = change->claim_datasets(store_); !s) change = s;
  } else if (const auto* c = std::get_if<RemoveChange>(&req.change)) {
    change = prepare_removal(store_, c->job, c->step);
    if (!change && change.status().code() == ptc::Code::kNotFound) change = PreparedChange{};  // never had it
  } else if (const auto* c = std::get_if<SaveChange>(&req.change)) {
    change = prepare_save(*c, reply);
    if (change) {
      std::lock_guard lock(mu_);
      saving_[req.tx] = {c->job, c->step};
    }
  }
  if (!change) {
    // Refused because a change of the same step or dataset is prepared here and undecided:
    // name its coordinator, who ends it (docs/FORMATS.md "Keys in etcd"). The same record, or,
    // for a change of the job's datasets (a repartition re-splits them), one holding a dataset of
    // the job (its claim refused this one).
    ptc::Status why = change.status();
    std::lock_guard lock(mu_);
    const Held* holder = nullptr;
    std::string holder_tx;
    if (why.code() == ptc::Code::kFailedPrecondition) {
      const auto [job, datasets] = dataset_change_of(req);
      for (const auto& [t, h] : prepared_) {
        if (t == req.tx) continue;
        const bool same_record = h.key == record_key(req);
        const bool holds_job_dataset =
            datasets && std::any_of(h.change.datasets.begin(), h.change.datasets.end(),
                                    [&](const DatasetChange& d) { return d.next->job() == job; });
        if (same_record || (!holder && holds_job_dataset)) {
          holder = &h;
          holder_tx = t;
          if (same_record) break;
        }
      }
    }
    if (holder)
      why =
          ptc::error(why.code(), why.message() + ": it holds the change that node " + holder->coordinator +
                                     " coordinates (transaction " + holder_tx + "), not decided yet; that goes when " +
                                     holder->coordinator + " commits or aborts it" +
                                     (holder->lease != 0 ? ", or when its lease ends" : ""));
    return why.with_context("node " + id());
  }
  failpoint("peer.prepared");
  // With etcd deciding, this node keeps the change across a restart: once it answers
  // "prepared", the coordinator may commit, and this node's part must not die with it. A save's
  // part too: its blobs are sealed by now, and the record may name this node their holder.
  const bool keep = req.lease != 0 && can_keep(*change);
  if (keep) {
    const json about = {{"key", record_key(req)}, {"coordinator", req.coordinator}, {"lease", req.lease}};
    if (auto s = keep_prepared(store_, req.tx, *change, about); !s) {
      drop(req.tx, *change, false);  // a save's part goes back to its pending step, to be tried again
      return s.with_context("node " + id() + ": keeping the prepared change");
    }
  }
  bool recorded = false;
  {
    std::lock_guard lock(mu_);
    if (std::find(aborted_.begin(), aborted_.end(), req.tx) == aborted_.end()) {
      prepared_.emplace(req.tx, Held{std::move(change).value(), record_key(req), req.coordinator, req.lease,
                                     std::chrono::steady_clock::now(), keep});
      recorded = std::find(recorded_.begin(), recorded_.end(), req.tx) != recorded_.end();
      if (!recorded) return transport::Reply(to_json(reply));
    }
  }
  if (recorded) {
    // Its record came while it was prepared (the others committed it without this node).
    ptc::log::info("transaction {} was recorded in etcd while this node prepared it; committing", req.tx);
    if (auto s = finish(req.tx, true); !s)
      ptc::log::error("committing transaction {} recorded in etcd: {}", req.tx, s.to_string());
    return transport::Reply(to_json(reply));
  }
  // The coordinator aborted it while this node prepared it: nothing of it stays.
  drop(req.tx, *change, keep);
  ptc::log::info("dropped the change of transaction {}: its coordinator aborted it while this node prepared it",
                 req.tx);
  return aborted_meanwhile();
}

std::optional<std::pair<std::string, std::string>> PeerService::take_saving(const std::string& tx) {
  std::lock_guard lock(mu_);
  auto it = saving_.find(tx);
  if (it == saving_.end()) return std::nullopt;
  auto saved = it->second;
  saving_.erase(it);
  return saved;
}

void PeerService::drop(const std::string& tx, PreparedChange& change, bool kept, const std::string& why) {
  const auto saved = take_saving(tx);
  // A save's part is tried again, unless the abort says why that would not help.
  if (saved && why.empty()) saves_.take_back(saved->first, saved->second, change);
  abort_change(store_, change);
  if (kept) forget_prepared(store_, tx);
  if (saved) saves_.part_done(saved->first, saved->second, false, why);
}

ptc::Result<transport::Reply> PeerService::commit(const json& j) {
  PTC_ASSIGN_OR_RETURN(const FinishRequest req, finish_request_from_json(j, true));
  PTC_RETURN_IF_ERROR(finish(req.tx, true));
  return transport::Reply(json::object());
}

ptc::Result<transport::Reply> PeerService::abort(const json& j) {
  PTC_ASSIGN_OR_RETURN(const FinishRequest req, finish_request_from_json(j, false));
  PTC_RETURN_IF_ERROR(finish(req.tx, false, req.why));
  return transport::Reply(json::object());
}

ptc::Status PeerService::finish(const std::string& tx, bool commit, const std::string& why) {
  PreparedChange change;
  bool kept = false;
  std::promise<ptc::Status> outcome;
  std::shared_future<ptc::Status> under_way;
  {
    std::unique_lock lock(mu_);
    auto it = prepared_.find(tx);
    if (it == prepared_.end()) {
      if (!commit) {
        // Aborting what was never prepared (or already aborted) is fine; one still being
        // prepared is aborted when its prepare ends (prepare()).
        if (std::find(aborted_.begin(), aborted_.end(), tx) == aborted_.end()) {
          aborted_.push_back(tx);
          if (aborted_.size() > kRememberCommitted) aborted_.pop_front();
        }
        return ptc::Status::ok();
      }
      // Committed already (on its record in etcd), or being committed by another thread: a
      // commit answered before this node serves the new version would let the coordinator
      // report success too early, so that one is waited for.
      if (auto c = committing_.find(tx); c != committing_.end())
        under_way = c->second;
      else if (std::find(committed_.begin(), committed_.end(), tx) != committed_.end())
        return ptc::Status::ok();
      else
        return ptc::not_found("no prepared transaction " + tx + " on node " + id());
    } else {
      change = std::move(it->second.change);
      kept = it->second.kept;
      prepared_.erase(it);
      if (commit) committing_.emplace(tx, outcome.get_future().share());
    }
  }
  if (under_way.valid()) return under_way.get();
  const std::string name = describe(change);
  if (!commit) {
    drop(tx, change, kept, why);
    ptc::log::info("aborted the change of {} (transaction {}){}", name, tx, why.empty() ? "" : ": " + why);
    return ptc::Status::ok();
  }
  const auto saved = take_saving(tx);
  const ptc::Status committed = commit_change(store_, change).with_context("node " + id());
  if (kept) forget_prepared(store_, tx);  // committed, or (the commit failed) aborted
  {
    std::lock_guard lock(mu_);
    committing_.erase(tx);
    if (committed) {
      committed_.push_back(tx);
      if (committed_.size() > kRememberCommitted) committed_.pop_front();
    }
  }
  if (saved) saves_.part_done(saved->first, saved->second, committed.is_ok());
  outcome.set_value(committed);  // a save's part is done too: the mount shows it committed, not pending
  PTC_RETURN_IF_ERROR(committed);
  ptc::log::info("committed {} (transaction {})", name, tx);
  return ptc::Status::ok();
}

}  // namespace ptcfs
