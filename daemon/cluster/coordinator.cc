// The coordinator (daemon/cluster/coordinator.h): imports and repartitions across every
// node, in two phases; the state of every node; catching up after a restart.
#include "daemon/cluster/coordinator.h"

#include <chrono>
#include <ctime>
#include <set>
#include <thread>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/prepare.h"
#include "daemon/store/failpoint.h"
#include "ptc/base/log.h"

namespace ptcfs {

using nlohmann::json;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What settle_undecided writes over `r` so that the lost transaction `tx`, which compares the
// record's revision, can never apply: the record as it is, marked `fenced`, or where there
// was none a removal (nothing to remove: nodes keep what they have). A record that does not
// decode is written back unchanged: the write alone moves its revision.
json fence_over(const std::string& key, const Record& r, const std::string& tx) {
  if (r.revision == 0) {
    StepRecord none;
    none.removed = true;
    none.fenced = tx;
    return to_json(none);
  }
  auto rec = keyed_record(key, r.value);
  if (!rec) return r.value;
  return std::visit(
      [&](auto v) {
        v.fenced = tx;
        return to_json(v);
      },
      rec->value);
}

}  // namespace

std::string Coordinator::id() const { return name_of(self_); }

std::vector<ptc::Result<json>> Coordinator::ask_all(const std::vector<int>& nodes,
                                                    const std::function<json(int)>& request) {
  std::vector<ptc::Result<json>> out(nodes.size(), ptc::internal("not asked"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes.size(); ++i)
    threads.emplace_back([&, i] {
      const json req = request(nodes[i]);
      if (nodes[i] == self_) {
        auto r = local_.handle(req);
        out[i] = r ? ptc::Result<json>(std::move(r->result)) : ptc::Result<json>(r.status());
      } else {
        out[i] = peers_.call(nodes[i], req);
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

ptc::Status Coordinator::finish_all(const std::vector<int>& nodes, const std::string& tx, bool commit) {
  const auto answers = ask_all(nodes, [&](int) { return json{{"op", commit ? "peer.commit" : "peer.abort"}, {"tx", tx}}; });
  ptc::Status first;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (answers[i]) continue;
    if (first.is_ok()) first = answers[i].status();
    if (!commit) {
      ptc::log::warn("node {} missed the abort of transaction {} ({}); it is sent again until the node answers",
                     name_of(nodes[i]), tx, answers[i].status().to_string());
      std::lock_guard lock(mu_);
      unaborted_.emplace_back(nodes[i], tx);
    }
  }
  return first;
}

void Coordinator::settle_undecided() {
  // Nothing settles while this node cannot reach etcd (fenced); called every second, it must
  // not wait on etcd each time meanwhile.
  if (!members_.can_change()) return;
  std::vector<Undecided> owed;
  {
    std::lock_guard lock(mu_);
    owed.swap(undecided_);
  }
  for (auto& u : owed) {
    // Make the lost answer final: the record was written by this change (commit it), or it
    // is rewritten now so that this change's transaction can never apply (abort it).
    auto rec = members_.read(u.key);
    bool commit = false;
    if (rec && written_by(u.key, rec->value, u.tx)) {
      commit = true;
    } else if (rec) {
      auto done = rec->revision == u.prior.revision
                      ? members_.decide(u.key, rec->revision, fence_over(u.key, *rec, u.tx))
                      : ptc::Result<bool>(true);
      if (!done || !*done) rec = ptc::unavailable("retry");  // read again next time
    }
    if (!rec) {
      std::lock_guard lock(mu_);
      undecided_.push_back(std::move(u));
      continue;
    }
    (void)finish_all(u.nodes, u.tx, commit);
    members_.unlock(u.key);  // held since the decision went unanswered (decide)
    ptc::log::info("{}: etcd answers again; the change is {} on every node and {} is free", u.what,
                   commit ? "committed" : "aborted", u.key);
  }
}

size_t Coordinator::retry_aborts() {
  settle_undecided();
  std::vector<std::pair<int, std::string>> owed;
  {
    std::lock_guard lock(mu_);
    owed.swap(unaborted_);
  }
  std::vector<std::pair<int, std::string>> still;
  for (const auto& [node, tx] : owed) {
    auto r = peers_.call(node, json{{"op", "peer.abort"}, {"tx", tx}});
    if (r) ptc::log::info("node {} took the abort of transaction {} it had missed", name_of(node), tx);
    else still.emplace_back(node, tx);
  }
  std::lock_guard lock(mu_);
  unaborted_.insert(unaborted_.end(), still.begin(), still.end());
  return unaborted_.size();
}

std::vector<std::string> Coordinator::placement_or_all(const std::vector<std::string>& nodes) const {
  if (!nodes.empty()) return nodes;
  std::vector<std::string> all;
  for (int n : members_.members()) all.push_back(name_of(n));
  return all;
}

std::vector<int> Coordinator::others() const {
  std::vector<int> out;
  for (int n : members_.members())
    if (n != self_) out.push_back(n);
  return out;
}

PrepareRequest Coordinator::request(const std::string& tx, decltype(PrepareRequest::change) change) const {
  return PrepareRequest{tx, std::move(change), id(), members_.lease()};
}

ptc::Result<Coordinator::Locked> Coordinator::record_before_change(const std::string& key) {
  PTC_RETURN_IF_ERROR(members_.can_change());
  // A change of the key this node coordinated and etcd did not answer the decision of still
  // holds the key's lock: settle it first (etcd answers now, or the lock below is refused).
  settle_undecided();
  {
    std::lock_guard lock(mu_);
    for (const auto& u : undecided_)
      if (u.key == key)
        return ptc::error(ptc::Code::kFailedPrecondition,
                          u.what + " (transaction " + u.tx + ", coordinated by this node, " + id() +
                              ") is not settled yet: etcd did not answer its commit; try again when etcd answers");
  }
  PTC_RETURN_IF_ERROR(members_.lock(key));
  Locked out(members_, key);
  PTC_ASSIGN_OR_RETURN(Record r, members_.read(key));
  static_cast<Record&>(out) = std::move(r);
  return out;
}

ptc::Status Coordinator::decide(const std::vector<int>& nodes, const std::string& tx, const std::string& key,
                                Locked& prior, json record, const std::string& what) {
  failpoint("coordinator.prepared");
  record["tx"] = tx;
  record["coordinator"] = id();
  // An unknown outcome (etcd lost a member and elects a leader, or this node fenced itself
  // for an instant) is asked again until the decision window ends. Asking again is safe: the
  // transaction checks the record's revision and this node's lease, so at most one applies,
  // and a read that finds the record moved tells which one did.
  const auto until = std::chrono::steady_clock::now() + members_.decision_window();
  auto won = members_.decide(key, prior.revision, record);
  const bool unanswered = !won;
  if (unanswered) ptc::log::warn("{}: etcd did not answer the commit ({}); asking again", what, won.status().to_string());
  while (!won && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    won = members_.decide(key, prior.revision, record);
  }
  if (unanswered && !(won && *won) && members_.can_change().is_ok()) {
    // An unanswered attempt may have been applied: the record tells.
    if (auto back = members_.read(key); back && back->revision != prior.revision) won = written_by(key, back->value, tx);
  }
  if (!won) {
    // Unknown outcome (etcd did not answer): settle_undecided() settles it once etcd answers.
    // Until then the change still holds the key: its lock stays taken (a change retried
    // meanwhile is refused naming this node), and goes when the change is settled, or with
    // this node's lease.
    {
      std::lock_guard lock(mu_);
      undecided_.push_back(Undecided{nodes, tx, key, prior, what});
      prior.members = nullptr;
    }
    return won.status().with_context(
        what + ": etcd did not answer the commit; node " + id() + " keeps " + key +
        " locked until etcd answers, then, within a second, the change is aborted on every node (committed, if "
        "etcd recorded it) and the lock is freed; if node " + id() + " stops first, the lock goes with its lease (" +
        std::to_string(members_.decision_window().count() / 1000) + " s)");
  }
  if (!*won) {
    (void)finish_all(nodes, tx, false);
    return ptc::error(ptc::Code::kFailedPrecondition,
                      what + " aborted on every node: " + key + " changed in etcd since it was prepared (another "
                             "change committed first), or this node's lease ended");
  }
  failpoint("coordinator.decided");
  auto s = finish_all(nodes, tx, true);
  if (!s && members_.lease() != 0) {
    ptc::log::warn("{}: committed in etcd; a node missed the commit message ({}) and switches when it sees the record",
                   what, s.to_string());
    return ptc::Status::ok();
  }
  return s.with_context(what + " committed partly");
}

ptc::Result<json> Coordinator::import(const std::string& dir, const std::string& job, const std::string& step,
                                      const std::vector<std::string>& nodes_arg,
                                      const transport::ProgressSink& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto nodes = placement_or_all(nodes_arg);
  for (const auto& n : nodes)
    if (cluster()->find(n) < 0) return ptc::invalid("node '" + n + "' is not in the cluster");
  if (step == "data") return ptc::invalid("step name 'data' is reserved: MNT/<job>/data holds the job's datasets");
  // Every node records the step (all mounts show the whole namespace), so every node takes part.
  PTC_ASSIGN_OR_RETURN(Locked prior, record_before_change(step_key(job, step)));
  if (prior.revision != 0) {
    PTC_ASSIGN_OR_RETURN(const KeyedRecord rec, keyed_record(prior.key, prior.value));
    if (!rec.removed())
      return ptc::error(ptc::Code::kAlreadyExists, job + "/" + step + " is already recorded in etcd (version " +
                                                       std::to_string(rec.version()) + ")");
  }
  const std::vector<int> all = members_.members();
  const std::string tx = new_transaction_id();
  if (progress) progress(json{{"phase", "prepare"}, {"done", 0}, {"total", all.size()}});
  const std::vector<int> gpus = ptc::gpus_of(*cluster(), nodes);  // pinned with the placement
  const json prepare = to_json(request(tx, ImportChange{dir, job, step, nodes, gpus}));
  const auto answers = ask_all(all, [&](int) { return prepare; });
  ptc::Status failed;
  std::set<uint64_t> digests;
  size_t shards = 0;
  uint64_t bytes = 0, tensors = 0;
  json per_node = json::array();
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string nid = name_of(all[i]);
    auto r = answers[i] ? prepare_reply_from_json(*answers[i], "prepare reply of node " + nid) : answers[i].status();
    if (!r) {
      if (failed.is_ok()) failed = r.status();
      continue;
    }
    digests.insert(r->ptc_digest);
    tensors = r->tensors;  // the same on every node: their ptc.json agree (the digests)
    shards += r->shards;
    bytes += r->bytes;
    per_node.push_back({{"node", nid}, {"shards", r->shards}, {"bytes", r->bytes}});
  }
  if (failed.is_ok() && digests.size() > 1)
    failed = ptc::invalid("ptc.json differs between the nodes' copies of " + dir);
  if (!failed.is_ok()) {
    (void)finish_all(all, tx, false);
    ptc::log::warn("import of {}/{} aborted on every node: {}", job, step, failed.to_string());
    return failed;
  }
  PTC_RETURN_IF_ERROR(decide(all, tx, step_key(job, step), prior, json{{"kind", "import"}, {"version", 1}, {"nodes", nodes}, {"gpus", gpus}},
                             "import of " + job + "/" + step));
  ptc::log::info("imported {}/{} on {} nodes: {} shard copies, {} bytes", job, step, all.size(), shards, bytes);
  return json{{"job", job},       {"step", step},         {"shards", shards},        {"tensors", tensors},
              {"bytes", bytes}, {"seconds", since(t0)}, {"nodes", std::move(per_node)}};
}

ptc::Result<RepartitionResult> Coordinator::repartition(const RepartitionRequest& req,
                                                        const std::vector<std::string>& nodes_arg,
                                                        const transport::ProgressSink& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string name = req.job + "/" + req.step;
  auto report = [&](const char* phase, uint64_t done, uint64_t total) {
    if (progress) progress(json{{"phase", phase}, {"done", done}, {"total", total}});
  };
  PTC_ASSIGN_OR_RETURN(std::shared_ptr<const StepVersion> old, current_version(store_, req.job, req.step));
  const ptc::Layout& from = old->layout();

  ClusterChange c;
  c.job = req.job;
  c.step = req.step;
  c.from_version = old->version();
  c.ptc = from.ptc();
  c.from_nodes = old->placement().nodes;
  // GPU counts pinned with the placement (a version from before they were kept: as now).
  c.from_gpus = old->placement().gpus.empty() ? ptc::gpus_of(*cluster(), c.from_nodes) : old->placement().gpus;
  c.from_holders = old->placement().holders;
  if (c.from_nodes.empty()) return ptc::error(ptc::Code::kFailedPrecondition, name + " was imported outside the cluster");
  c.to = req.to;
  c.to_nodes = placement_or_all(nodes_arg);
  c.to_gpus = ptc::gpus_of(*cluster(), c.to_nodes);

  RepartitionResult res;
  PTC_ASSIGN_OR_RETURN(const ptc::Layout to, start_result(req, *old, res));
  // Every node re-splits the job's datasets in its prepare; refuse here when one cannot be.
  auto datasets = resplit_datasets(store_, req.job, req.to.dp);
  if (!datasets) return datasets.status().with_context("cannot repartition " + name + " to " + req.to.to_string());
  note_datasets(*datasets, res);
  if (req.to == from.parallelism() && c.to_nodes == c.from_nodes && datasets->empty()) {
    res.unchanged = true;
    res.bytes_total = old->total_bytes();
    return res;
  }

  // What etcd records of the step, who is up, and at which version.
  PTC_ASSIGN_OR_RETURN(Locked prior, record_before_change(step_key(req.job, req.step)));
  if (prior.revision != 0) {
    PTC_ASSIGN_OR_RETURN(const KeyedRecord rec, keyed_record(prior.key, prior.value));
    if (rec.version() != old->version())
      return ptc::error(ptc::Code::kFailedPrecondition,
                        "etcd records version " + std::to_string(rec.version()) + " of " + name + ", this node has " +
                            std::to_string(old->version()) + " (it is catching up; try again in a moment)");
  }
  report("state", 0, 1);
  const std::vector<int> all = members_.members();
  const auto states = ask_all(all, [&](int) { return json{{"op", "peer.state"}, {"job", req.job}, {"step", req.step}}; });
  std::vector<int> up;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string nid = name_of(all[i]);
    auto r = states[i] ? step_state_from_json(*states[i], "state of node " + nid) : states[i].status();
    if (!r) {
      if (r.status().code() == ptc::Code::kNotFound) {
        up.push_back(all[i]);  // up, without the step (a node that joined later)
        if (std::find(c.from_nodes.begin(), c.from_nodes.end(), nid) != c.from_nodes.end()) c.down.push_back(nid);
        continue;
      }
      ptc::log::warn("repartition of {}: node {} is unreachable: {}", name, nid, r.status().to_string());
      c.down.push_back(nid);
      continue;
    }
    const uint64_t v = r->version;
    if (v != old->version())
      return ptc::error(ptc::Code::kFailedPrecondition, "node " + nid + " has version " + std::to_string(v) + " of " +
                                                            name + ", this node " + std::to_string(old->version()) +
                                                            " (a change is under way or a node missed one)");
    up.push_back(all[i]);
  }
  // A node of the old placement that is no member now (it left) serves nothing either.
  std::set<std::string> up_ids;
  for (int n : up) up_ids.insert(name_of(n));
  std::set<std::string> sources(c.from_nodes.begin(), c.from_nodes.end());
  for (const auto& h : c.from_holders) sources.insert(h.begin(), h.end());
  for (const auto& nid : sources)
    if (!up_ids.count(nid) && std::find(c.down.begin(), c.down.end(), nid) == c.down.end()) c.down.push_back(nid);
  for (const auto& nid : c.to_nodes)
    if (std::find(c.down.begin(), c.down.end(), nid) != c.down.end() &&
        std::find(up.begin(), up.end(), cluster()->find(nid)) == up.end())
      return ptc::error(ptc::Code::kUnavailable, "node " + nid + " is down but the new layout places ranks on it "
                                                 "(leave it out with --nodes)");

  report("plan", 0, 1);
  PTC_ASSIGN_OR_RETURN(const ptc::ClusterConfig table, change_table(c, *cluster()));
  PTC_ASSIGN_OR_RETURN(ptc::ClusterHoldings h, cluster_holdings(from, to, c, table));
  auto plan_r = ptc::make_cluster_plan(from, to, h);
  if (!plan_r) return plan_r.status().with_context("cannot repartition " + name);
  const ptc::Plan& plan = *plan_r;
  std::vector<uint64_t> min_per_node;
  res.bytes_min = ptc::min_transfer_bytes(from, to, h, &min_per_node);
  res.copies = plan.copies.size();
  res.fills = plan.fills.size();
  res.bytes_total = plan.bytes_total;
  res.bytes_fill = plan.bytes_fill;
  res.bytes_remapped = plan.bytes_local;
  if (req.dry_run) {
    res.bytes_moved = plan.bytes_remote;
    res.seconds = since(t0);
    return res;
  }

  const std::string tx = new_transaction_id();
  c.digest = plan_digest(plan);
  report("prepare", 0, up.size());
  const json prepare = to_json(request(tx, c));
  const auto answers = ask_all(up, [&](int) { return prepare; });
  ptc::Status failed;
  for (size_t i = 0; i < up.size(); ++i) {
    const std::string nid = name_of(up[i]);
    auto r = answers[i] ? prepare_reply_from_json(*answers[i], "prepare reply of node " + nid) : answers[i].status();
    if (!r) {
      if (failed.is_ok()) failed = r.status();
      continue;
    }
    res.bytes_moved += r->bytes_received;
    const int in_table = table.find(nid);
    res.per_node.push_back({nid, r->bytes_received, in_table < 0 ? 0 : min_per_node[static_cast<size_t>(in_table)]});
  }
  if (!failed.is_ok()) {
    (void)finish_all(up, tx, false);
    ptc::log::warn("repartition of {} aborted on every node; the old layout stays: {}", name, failed.to_string());
    return failed.with_context("repartition of " + name + " aborted, the old layout stays");
  }
  report("commit", 0, up.size());
  res.version = old->version() + 1;
  PTC_RETURN_IF_ERROR(decide(up, tx, step_key(req.job, req.step), prior,
                             json{{"kind", "repartition"},
                                  {"version", res.version},
                                  {"parallelism", req.to.to_string()},
                                  {"nodes", c.to_nodes},
                                  {"gpus", c.to_gpus}},
                             "repartition of " + name));
  res.seconds = since(t0);
  ptc::log::info("repartitioned {} {} -> {} on {} nodes (version {}): {} bytes moved, {} the minimum, in {:.3f} s", name,
                 res.from.to_string(), res.to.to_string(), up.size(), res.version, res.bytes_moved, res.bytes_min,
                 res.seconds);
  return res;
}

bool Coordinator::catch_up_step(const std::string& job, const std::string& step, uint64_t at_least) {
  const std::string name = job + "/" + step;
  const std::shared_ptr<const StepVersion> v = current_version(store_, job, step).value_or(nullptr);
  const uint64_t have = v ? v->version() : 0;
  const std::vector<int> peers = others();
  const auto answers = ask_all(peers, [&](int) { return json{{"op", "peer.state"}, {"job", job}, {"step", step}}; });
  std::optional<StepState> newest;
  for (size_t i = 0; i < answers.size(); ++i) {
    if (!answers[i]) continue;
    auto s = step_state_from_json(*answers[i], "state of " + name + " from node " + name_of(peers[i]));
    if (!s) {
      ptc::log::warn("catching up {}: {}", name, s.status().to_string());
      continue;
    }
    if (s->version > std::max(have, newest ? newest->version : 0)) newest = std::move(s).value();
  }
  if (!newest || newest->version < at_least) return false;
  auto layout = ptc::Layout::make(newest->ptc, newest->ptc.parallelism);
  if (!layout) return false;
  StepPlacement placement;
  placement.nodes = newest->nodes;
  placement.gpus = newest->gpus;
  placement.held.assign(layout->shards().size(), false);
  const size_t nshards = layout->shards().size();
  PreparedChange change(store_);
  change.replaced = v;
  change.next = store_.new_version(job, step, newest->version, std::move(layout).value(),
                                   std::vector<std::vector<StoredSlice>>(nshards), std::move(placement));
  if (auto s = change.claim(store_, v ? Claim::kChangeStep : Claim::kNewStep, job, step); !s) {
    ptc::log::warn("catching up {}: {}", name, s.to_string());
    return false;
  }
  if (auto s = commit_change(store_, change); !s) {
    ptc::log::warn("catching up {}: {}", name, s.to_string());
    return false;
  }
  ptc::log::info("{} is at version {} on the other nodes; caught up (this node holds none of it)", name, newest->version);
  return true;
}

size_t Coordinator::catch_up() {
  size_t caught = 0;
  const auto snap = store_.snapshot();  // commits below publish new snapshots; this one stays valid
  for (const auto& [key, v] : snap->steps)
    if (!v->placement().nodes.empty() && catch_up_step(key.first, key.second, 0)) ++caught;
  return caught + catch_up_datasets();
}

void Coordinator::on_record(const KeyedRecord& rec) {
  const std::string& tx = rec.tx();
  if (!tx.empty() && local_.commit_decided(tx)) return;  // prepared here: the record is its commit
  // A change prepared here against what this record replaced can never commit now.
  local_.drop_superseded(rec.key, tx, rec.version(), rec.removed());
  if (!rec.is_step()) return;  // a dataset's record: only its commit concerns this node
  const std::string& job = rec.job;
  const std::string& step = rec.name;
  auto have = [&] {
    auto v = current_version(store_, job, step);
    return v ? (*v)->version() : uint64_t{0};
  };
  if (rec.removed()) {
    if (have() == 0) return;
    auto change = prepare_removal(store_, job, step);
    const ptc::Status s = change ? commit_change(store_, *change) : change.status();
    if (s) ptc::log::info("{}/{} was removed on the other nodes (etcd records it); removed here too", job, step);
    else ptc::log::warn("{}/{} is removed in etcd but not here: {}", job, step, s.to_string());
    return;
  }
  const uint64_t version = rec.version();
  // The nodes that took part commit at about the time this record appears: give them a moment.
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (have() >= version || catch_up_step(job, step, version)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << attempt));
  }
  ptc::log::warn("{}/{}: etcd records version {}, and no other node serves it yet; this node stays at {}", job, step,
                 version, have());
}

ptc::Status Coordinator::remove(const std::string& job, const std::string& step) {
  const std::string name = job + "/" + step;
  PTC_ASSIGN_OR_RETURN(Locked prior, record_before_change(step_key(job, step)));
  const std::vector<int> all = members_.members();
  const std::string tx = new_transaction_id();
  const json prepare = to_json(request(tx, RemoveChange{job, step}));
  const auto answers = ask_all(all, [&](int) { return prepare; });
  for (const auto& a : answers) {
    if (a) continue;
    (void)finish_all(all, tx, false);
    return a.status().with_context("removing " + name + ": nothing was removed");
  }
  PTC_RETURN_IF_ERROR(decide(all, tx, step_key(job, step), prior, json{{"kind", "remove"}, {"removed", true}},
                             "removing " + name));
  ptc::log::info("removed {} on {} nodes", name, all.size());
  return ptc::Status::ok();
}

json Coordinator::nodes_status() {
  const std::vector<int> all = members_.members();
  const auto answers = ask_all(all, [](int) { return json{{"op", "peer.stats"}}; });
  json out = json::array();
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& n = cluster()->nodes[static_cast<size_t>(all[i])];
    auto stats = answers[i] ? peer_stats_from_json(*answers[i], "stats of node " + n.id) : answers[i].status();
    json j = {{"id", n.id}, {"addr", n.addr}, {"gpus", n.gpus}, {"up", stats.is_ok()}};
    if (stats) {
      j["bytes_sent"] = stats->bytes_sent;
      j["bytes_received"] = stats->bytes_received;
    } else {
      j["error"] = stats.status().message();
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace ptcfs
