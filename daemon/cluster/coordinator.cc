// The coordinator half of ClusterNode: imports and repartitions across every node, in two
// phases (daemon/cluster/node.h).
#include <chrono>
#include <ctime>
#include <random>
#include <set>
#include <thread>

#include "daemon/cluster/node.h"
#include "ptc/log.h"

namespace ptcfs {

using nlohmann::json;

std::string new_transaction_id() {
  std::random_device rd;
  std::mt19937_64 g((static_cast<uint64_t>(rd()) << 32) ^ rd());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(g()));
  return buf;
}

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<ClusterNode::Answer> ClusterNode::ask_all(const std::vector<int>& nodes,
                                                      const std::function<json(int)>& request) {
  std::vector<Answer> out(nodes.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes.size(); ++i)
    threads.emplace_back([&, i] {
      const json req = request(nodes[i]);
      if (nodes[i] == self_) {
        auto r = handle_peer(req);
        out[i].result = r ? ptc::Result<json>(std::move(r->result)) : ptc::Result<json>(r.status());
      } else {
        out[i].result = peers_->call(nodes[i], req);
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

ptc::Status ClusterNode::finish_all(const std::vector<int>& nodes, const std::string& tx, bool commit) {
  const auto answers = ask_all(nodes, [&](int) { return json{{"op", commit ? "peer.commit" : "peer.abort"}, {"tx", tx}}; });
  ptc::Status first;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!answers[i].result && first.is_ok()) first = answers[i].result.status();
  return first;
}

std::vector<int> ClusterNode::all_nodes() const {
  std::vector<int> out;
  for (size_t i = 0; i < cluster().nodes.size(); ++i) out.push_back(static_cast<int>(i));
  return out;
}

std::vector<int> ClusterNode::other_nodes() const {
  std::vector<int> out;
  for (int n : all_nodes())
    if (n != self_) out.push_back(n);
  return out;
}

std::vector<std::string> ClusterNode::placement_or_all(const std::vector<std::string>& nodes) const {
  if (!nodes.empty()) return nodes;
  std::vector<std::string> all;
  for (const auto& n : cluster().nodes) all.push_back(n.id);
  return all;
}

ptc::Result<json> ClusterNode::import(const std::string& dir, const std::string& job, const std::string& step,
                                      const std::vector<std::string>& nodes_arg,
                                      const transport::ProgressSink& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto nodes = placement_or_all(nodes_arg);
  for (const auto& n : nodes)
    if (cluster().find(n) < 0) return ptc::invalid("node '" + n + "' is not in the cluster");
  if (step == "data") return ptc::invalid("step name 'data' is reserved: MNT/<job>/data holds the job's datasets");
  // Every node records the step (all mounts show the whole namespace), so every node takes part.
  const std::vector<int> all = all_nodes();
  const std::string tx = new_transaction_id();
  if (progress) progress(json{{"phase", "prepare"}, {"done", 0}, {"total", all.size()}});
  const auto answers = ask_all(all, [&](int) {
    return json{{"op", "peer.prepare"}, {"tx", tx}, {"kind", "import"}, {"dir", dir}, {"job", job}, {"step", step},
                {"nodes", nodes}};
  });
  ptc::Status failed;
  std::set<uint64_t> digests;
  size_t shards = 0;
  uint64_t bytes = 0;
  json per_node = json::array();
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& r = answers[i].result;
    if (!r) {
      if (failed.is_ok()) failed = r.status();
      continue;
    }
    digests.insert((*r)["ptc_digest"].get<uint64_t>());
    shards += (*r)["shards"].get<size_t>();
    bytes += (*r)["bytes"].get<uint64_t>();
    per_node.push_back({{"node", cluster().nodes[static_cast<size_t>(all[i])].id}, {"shards", (*r)["shards"]},
                        {"bytes", (*r)["bytes"]}});
  }
  if (failed.is_ok() && digests.size() > 1)
    failed = ptc::invalid("ptc.json differs between the nodes' copies of " + dir);
  if (!failed.is_ok()) {
    (void)finish_all(all, tx, false);
    ptc::log::warn("import of {}/{} aborted on every node: {}", job, step, failed.to_string());
    return failed;
  }
  if (auto s = finish_all(all, tx, true); !s) return s.with_context("import of " + job + "/" + step + " committed partly");
  auto snap = store_->snapshot();
  auto it = snap->steps.find({job, step});
  const size_t tensors = it == snap->steps.end() ? 0 : it->second->layout().ptc().tensors.size();
  ptc::log::info("imported {}/{} on {} nodes: {} shard copies, {} bytes", job, step, all.size(), shards, bytes);
  return json{{"job", job},       {"step", step},         {"shards", shards},        {"tensors", tensors},
              {"bytes", bytes}, {"seconds", since(t0)}, {"nodes", std::move(per_node)}};
}

ptc::Result<RepartitionResult> ClusterNode::repartition(const RepartitionRequest& req,
                                                        const std::vector<std::string>& nodes_arg,
                                                        const transport::ProgressSink& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string name = req.job + "/" + req.step;
  auto report = [&](const char* phase, uint64_t done, uint64_t total) {
    if (progress) progress(json{{"phase", phase}, {"done", done}, {"total", total}});
  };
  PTC_ASSIGN_OR_RETURN(std::shared_ptr<const StepVersion> old, current_version(*store_, req.job, req.step));
  const ptc::Layout& from = old->layout();

  ClusterChange c;
  c.job = req.job;
  c.step = req.step;
  c.from_version = old->version();
  c.ptc = from.ptc();
  c.from_nodes = old->placement().nodes;
  if (c.from_nodes.empty()) return ptc::error(ptc::Code::kFailedPrecondition, name + " was imported outside the cluster");
  c.to = req.to;
  c.to_nodes = placement_or_all(nodes_arg);

  RepartitionResult res;
  PTC_ASSIGN_OR_RETURN(const ptc::Layout to, start_result(req, *old, res));
  // Every node re-splits the job's datasets in its prepare; refuse here when one cannot be.
  auto datasets = resplit_datasets(*store_, req.job, req.to.dp);
  if (!datasets) return datasets.status().with_context("cannot repartition " + name + " to " + req.to.to_string());
  note_datasets(*datasets, res);
  if (req.to == from.parallelism() && c.to_nodes == c.from_nodes && datasets->empty()) {
    res.unchanged = true;
    res.bytes_total = old->total_bytes();
    return res;
  }

  // Who is up, and at which version.
  report("state", 0, 1);
  const std::vector<int> all = all_nodes();
  const auto states = ask_all(all, [&](int) { return json{{"op", "peer.state"}, {"job", req.job}, {"step", req.step}}; });
  std::vector<int> up;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string& nid = cluster().nodes[static_cast<size_t>(all[i])].id;
    const auto& r = states[i].result;
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
    const uint64_t v = (*r)["version"].get<uint64_t>();
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
  const uint64_t digest = plan_digest(plan);
  json ptc_json = json::parse(ptc::ptc_to_json(c.ptc));
  report("prepare", 0, up.size());
  const auto answers = ask_all(up, [&](int) {
    return json{{"op", "peer.prepare"}, {"tx", tx},           {"kind", "repartition"},   {"job", c.job},
                {"step", c.step},       {"from_version", c.from_version}, {"ptc", ptc_json}, {"from_nodes", c.from_nodes},
                {"to", c.to.to_string()}, {"to_nodes", c.to_nodes},      {"down", c.down},  {"digest", digest}};
  });
  ptc::Status failed;
  for (size_t i = 0; i < up.size(); ++i) {
    const auto& r = answers[i].result;
    if (!r) {
      if (failed.is_ok()) failed = r.status();
      continue;
    }
    const uint64_t got = (*r)["bytes_received"].get<uint64_t>();
    res.bytes_moved += got;
    res.per_node.push_back({cluster().nodes[static_cast<size_t>(up[i])].id, got,
                            min_per_node[static_cast<size_t>(up[i])]});
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

size_t ClusterNode::catch_up() {
  const std::vector<int> others = other_nodes();
  size_t caught = 0;
  const auto snap = store_->snapshot();  // commits below publish new snapshots; this one stays valid
  for (const auto& [key, v] : snap->steps) {
    if (v->placement().nodes.empty()) continue;
    const auto answers =
        ask_all(others, [&](int) { return json{{"op", "peer.state"}, {"job", key.first}, {"step", key.second}}; });
    const json* newest = nullptr;
    for (const auto& a : answers)
      if (a.result && (*a.result)["version"].get<uint64_t>() > (newest ? (*newest)["version"].get<uint64_t>() : v->version()))
        newest = &*a.result;
    if (!newest || !newest->contains("ptc")) continue;
    auto ptc = ptc::parse_ptc_json((*newest)["ptc"].dump(), "peer state of " + key.first + "/" + key.second);
    if (!ptc) continue;
    auto layout = ptc::Layout::make(*ptc, ptc->parallelism);
    if (!layout) continue;
    StepPlacement placement;
    for (const auto& n : (*newest)["nodes"]) placement.nodes.push_back(n.get<std::string>());
    placement.held.assign(layout->shards().size(), false);
    const size_t nshards = layout->shards().size();
    auto next = std::make_shared<StepVersion>(key.first, key.second, (*newest)["version"].get<uint64_t>(),
                                              static_cast<int64_t>(::time(nullptr)), std::move(layout).value(),
                                              std::vector<std::vector<StoredSlice>>(nshards), &store_->blobs(),
                                              std::move(placement), store_->remote());
    if (auto s = store_->commit(next, v); !s) {
      ptc::log::warn("catching up {}/{}: {}", key.first, key.second, s.to_string());
      continue;
    }
    ptc::log::info("{}/{} moved to version {} while this node was down; caught up (this node holds none of it)",
                   key.first, key.second, next->version());
    ++caught;
  }
  caught += catch_up_datasets();
  if (caught)
    if (auto gc = store_->collect_garbage(); !gc) ptc::log::warn("collecting blobs: {}", gc.status().to_string());
  return caught;
}

json ClusterNode::nodes_status() {
  const std::vector<int> all = all_nodes();
  const auto answers = ask_all(all, [](int) { return json{{"op", "peer.stats"}}; });
  json out = json::array();
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& n = cluster().nodes[static_cast<size_t>(all[i])];
    json j = {{"id", n.id}, {"addr", n.addr}, {"gpus", n.gpus}, {"up", answers[i].result.is_ok()}};
    if (answers[i].result) {
      j["bytes_sent"] = (*answers[i].result)["bytes_sent"];
      j["bytes_received"] = (*answers[i].result)["bytes_received"];
    } else {
      j["error"] = answers[i].result.status().message();
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace ptcfs
