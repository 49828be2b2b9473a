// The coordinator (daemon/cluster/coordinator.h): imports and repartitions across every
// node, in two phases; the state of every node; catching up after a restart.
#include "daemon/cluster/coordinator.h"

#include <chrono>
#include <ctime>
#include <set>
#include <thread>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/prepare.h"
#include "ptc/log.h"

namespace ptcfs {

using nlohmann::json;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const std::string& Coordinator::id() const { return node_id(cluster(), self_); }

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
                     node_id(cluster(), nodes[i]), tx, answers[i].status().to_string());
      std::lock_guard lock(mu_);
      unaborted_.emplace_back(nodes[i], tx);
    }
  }
  return first;
}

size_t Coordinator::retry_aborts() {
  std::vector<std::pair<int, std::string>> owed;
  {
    std::lock_guard lock(mu_);
    owed.swap(unaborted_);
  }
  std::vector<std::pair<int, std::string>> still;
  for (const auto& [node, tx] : owed) {
    auto r = peers_.call(node, json{{"op", "peer.abort"}, {"tx", tx}});
    if (r) ptc::log::info("node {} took the abort of transaction {} it had missed", node_id(cluster(), node), tx);
    else still.emplace_back(node, tx);
  }
  std::lock_guard lock(mu_);
  unaborted_.insert(unaborted_.end(), still.begin(), still.end());
  return unaborted_.size();
}

std::vector<std::string> Coordinator::placement_or_all(const std::vector<std::string>& nodes) const {
  if (!nodes.empty()) return nodes;
  std::vector<std::string> all;
  for (const auto& n : cluster().nodes) all.push_back(n.id);
  return all;
}

ptc::Result<json> Coordinator::import(const std::string& dir, const std::string& job, const std::string& step,
                                      const std::vector<std::string>& nodes_arg,
                                      const transport::ProgressSink& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto nodes = placement_or_all(nodes_arg);
  for (const auto& n : nodes)
    if (cluster().find(n) < 0) return ptc::invalid("node '" + n + "' is not in the cluster");
  if (step == "data") return ptc::invalid("step name 'data' is reserved: MNT/<job>/data holds the job's datasets");
  // Every node records the step (all mounts show the whole namespace), so every node takes part.
  const std::vector<int> all = all_nodes(cluster());
  const std::string tx = new_transaction_id();
  if (progress) progress(json{{"phase", "prepare"}, {"done", 0}, {"total", all.size()}});
  const json prepare = to_json(PrepareRequest{tx, ImportChange{dir, job, step, nodes}});
  const auto answers = ask_all(all, [&](int) { return prepare; });
  ptc::Status failed;
  std::set<uint64_t> digests;
  size_t shards = 0;
  uint64_t bytes = 0;
  json per_node = json::array();
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string& nid = node_id(cluster(), all[i]);
    auto r = answers[i] ? prepare_reply_from_json(*answers[i], "prepare reply of node " + nid) : answers[i].status();
    if (!r) {
      if (failed.is_ok()) failed = r.status();
      continue;
    }
    digests.insert(r->ptc_digest);
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
  if (auto s = finish_all(all, tx, true); !s) return s.with_context("import of " + job + "/" + step + " committed partly");
  auto snap = store_.snapshot();
  auto it = snap->steps.find({job, step});
  const size_t tensors = it == snap->steps.end() ? 0 : it->second->layout().ptc().tensors.size();
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
  c.from_holders = old->placement().holders;
  if (c.from_nodes.empty()) return ptc::error(ptc::Code::kFailedPrecondition, name + " was imported outside the cluster");
  c.to = req.to;
  c.to_nodes = placement_or_all(nodes_arg);

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

  // Who is up, and at which version.
  report("state", 0, 1);
  const std::vector<int> all = all_nodes(cluster());
  const auto states = ask_all(all, [&](int) { return json{{"op", "peer.state"}, {"job", req.job}, {"step", req.step}}; });
  std::vector<int> up;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string& nid = node_id(cluster(), all[i]);
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
  for (const auto& nid : c.to_nodes)
    if (std::find(c.down.begin(), c.down.end(), nid) != c.down.end() &&
        std::find(up.begin(), up.end(), cluster().find(nid)) == up.end())
      return ptc::error(ptc::Code::kUnavailable, "node " + nid + " is down but the new layout places ranks on it "
                                                 "(leave it out with --nodes)");

  report("plan", 0, 1);
  PTC_ASSIGN_OR_RETURN(ptc::ClusterHoldings h, cluster_holdings(from, to, c, cluster()));
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
  const json prepare = to_json(PrepareRequest{tx, c});
  const auto answers = ask_all(up, [&](int) { return prepare; });
  ptc::Status failed;
  for (size_t i = 0; i < up.size(); ++i) {
    const std::string& nid = node_id(cluster(), up[i]);
    auto r = answers[i] ? prepare_reply_from_json(*answers[i], "prepare reply of node " + nid) : answers[i].status();
    if (!r) {
      if (failed.is_ok()) failed = r.status();
      continue;
    }
    res.bytes_moved += r->bytes_received;
    res.per_node.push_back({nid, r->bytes_received, min_per_node[static_cast<size_t>(up[i])]});
  }
  if (!failed.is_ok()) {
    (void)finish_all(up, tx, false);
    ptc::log::warn("repartition of {} aborted on every node; the old layout stays: {}", name, failed.to_string());
    return failed.with_context("repartition of " + name + " aborted, the old layout stays");
  }
  report("commit", 0, up.size());
  if (auto s = finish_all(up, tx, true); !s) return s.with_context("repartition of " + name + " committed partly");
  res.version = old->version() + 1;
  res.seconds = since(t0);
  ptc::log::info("repartitioned {} {} -> {} on {} nodes (version {}): {} bytes moved, {} the minimum, in {:.3f} s", name,
                 res.from.to_string(), res.to.to_string(), up.size(), res.version, res.bytes_moved, res.bytes_min,
                 res.seconds);
  return res;
}

size_t Coordinator::catch_up() {
  const std::vector<int> others = other_nodes(cluster(), self_);
  size_t caught = 0;
  const auto snap = store_.snapshot();  // commits below publish new snapshots; this one stays valid
  for (const auto& [key, v] : snap->steps) {
    if (v->placement().nodes.empty()) continue;
    const std::string name = key.first + "/" + key.second;
    const auto answers =
        ask_all(others, [&](int) { return json{{"op", "peer.state"}, {"job", key.first}, {"step", key.second}}; });
    std::optional<StepState> newest;
    for (size_t i = 0; i < answers.size(); ++i) {
      if (!answers[i]) continue;
      auto s = step_state_from_json(*answers[i], "state of " + name + " from node " + node_id(cluster(), others[i]));
      if (!s) {
        ptc::log::warn("catching up {}: {}", name, s.status().to_string());
        continue;
      }
      if (s->version > (newest ? newest->version : v->version())) newest = std::move(s).value();
    }
    if (!newest) continue;
    auto layout = ptc::Layout::make(newest->ptc, newest->ptc.parallelism);
    if (!layout) continue;
    StepPlacement placement;
    placement.nodes = newest->nodes;
    placement.held.assign(layout->shards().size(), false);
    const size_t nshards = layout->shards().size();
    PreparedChange change;
    change.replaced = v;
    change.next = std::make_shared<StepVersion>(key.first, key.second, newest->version,
                                                static_cast<int64_t>(::time(nullptr)), std::move(layout).value(),
                                                std::vector<std::vector<StoredSlice>>(nshards), &store_.blobs(),
                                                std::move(placement), store_.remote());
    if (auto s = store_.begin_change(key.first, key.second); !s) {
      ptc::log::warn("catching up {}: {}", name, s.to_string());
      continue;
    }
    if (auto s = commit_change(store_, change); !s) {
      ptc::log::warn("catching up {}: {}", name, s.to_string());
      continue;
    }
    ptc::log::info("{} moved to version {} while this node was down; caught up (this node holds none of it)", name,
                   newest->version);
    ++caught;
  }
  return caught + catch_up_datasets();
}

ptc::Status Coordinator::remove(const std::string& job, const std::string& step) {
  const std::string name = job + "/" + step;
  const std::vector<int> all = all_nodes(cluster());
  const std::string tx = new_transaction_id();
  const json prepare = to_json(PrepareRequest{tx, RemoveChange{job, step}});
  const auto answers = ask_all(all, [&](int) { return prepare; });
  for (const auto& a : answers) {
    if (a) continue;
    (void)finish_all(all, tx, false);
    return a.status().with_context("removing " + name + ": nothing was removed");
  }
  PTC_RETURN_IF_ERROR(finish_all(all, tx, true), "removing " + name + " removed it partly");
  ptc::log::info("removed {} on {} nodes", name, all.size());
  return ptc::Status::ok();
}

json Coordinator::nodes_status() {
  const std::vector<int> all = all_nodes(cluster());
  const auto answers = ask_all(all, [](int) { return json{{"op", "peer.stats"}}; });
  json out = json::array();
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& n = cluster().nodes[static_cast<size_t>(all[i])];
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
