// The coordinator (daemon/cluster/coordinator.h): imports, repartitions and removals across
// every node, in two phases (daemon/cluster/two_phase.h); the state of every node. Catching up
// is the follower's (daemon/cluster/follower.h).
#include "daemon/cluster/coordinator.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <set>
#include <thread>
#include <tuple>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/repartition_part.h"
#include "daemon/dataset/dataset_ops.h"
#include "ptc/base/log.h"

namespace ptcfs {

using nlohmann::json;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// An import's check across replies: every node's copy of its ptc.json is the same (digests).
auto same_ptc(const std::string& dir) {
  return [dir](const std::vector<int>&, const std::vector<PrepareReply>& replies) {
    std::set<uint64_t> digests;
    for (const auto& r : replies) digests.insert(r.ptc_digest);
    return digests.size() > 1 ? invalid("ptc.json differs between the nodes' copies of " + dir) : Status::ok();
  };
}

}  // namespace

std::vector<std::string> Coordinator::placement_or_all(const std::vector<std::string>& nodes) const {
  if (!nodes.empty()) return nodes;
  std::vector<std::string> all;
  for (int n : members_.members()) all.push_back(name_of(n));
  return all;
}

Result<ImportResult> Coordinator::import(const ImportRequest& req, const PhaseProgress& progress) {
  if (req.hf)
    return invalid(
        "--format hf imports into a single daemon; on a cluster, import into one node's own daemon "
        "before it joins, or convert with `ptcfs ptc infer` and import the ptc.json checkpoint");
  PTC_RETURN_IF_ERROR(Store::check_new_step(req.job, req.step));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string name = req.job + "/" + req.step;
  const auto nodes = placement_or_all(req.nodes);
  for (const auto& n : nodes)
    if (cluster()->find(n) < 0) return invalid("node '" + n + "' is not in the cluster");
  // Every node records the step (all mounts show the whole namespace), so every node takes part.
  PTC_ASSIGN_OR_RETURN(TwoPhase::Locked prior, two_phase_.lock(etcd_step_key(req.job, req.step)));
  if (prior.record() && !prior.record()->removed())
    return error(Code::kAlreadyExists,
                 name + " is already recorded in etcd (version " + std::to_string(prior.record()->version()) + ")");
  const std::vector<int> gpus = ptc::gpus_of(*cluster(), nodes);  // pinned with the placement
  const StepRecord record = step_record("import", 1, nodes, gpus);
  ChangeSpec spec{.what = "import of " + name,
                  .nodes = members_.members(),
                  .request = two_phase_.request(ImportChange{req.dir, req.job, req.step, nodes, gpus}),
                  .check = same_ptc(req.dir),
                  .record = record,
                  .progress = progress};
  PTC_ASSIGN_OR_RETURN(const TwoPhase::Prepared done, two_phase_.run(prior, std::move(spec)));
  ImportResult res;
  std::tie(res.job, res.step) = std::tie(req.job, req.step);
  for (size_t i = 0; i < done.nodes.size(); ++i) {
    const PrepareReply& r = done.replies[i];
    res.tensors = r.tensors;  // the same on every node: their ptc.json agree (the digests)
    res.shards += r.shards;
    res.bytes += r.bytes;
    res.nodes.push_back({name_of(done.nodes[i]), r.shards, r.bytes});
  }
  res.seconds = since(t0);
  log::info("imported {} on {} nodes: {} shard copies, {} bytes", name, done.nodes.size(), res.shards, res.bytes);
  if (!req.then) return res;
  // Straight on into the asked layout (a restore at a new layout): the nodes pull from each other
  // only what their new shards lack.
  auto moved = repartition(RepartitionRequest{req.job, req.step, *req.then, false, req.nodes, 0}, progress);
  if (!moved)
    return moved.status().with_context("imported " + name + " at the layout of " + req.dir +
                                       ", but the repartition to " + req.then->to_string() + " failed");
  res.repartition = std::move(moved).value();
  res.seconds = since(t0);
  return res;
}

Result<std::vector<int>> Coordinator::nodes_up(RepartitionChange& c, uint64_t version) {
  const std::string name = c.job + "/" + c.step;
  const std::vector<int> all = members_.members();
  const auto states = peers_.state(all, StateRequest{c.job, c.step});
  std::vector<int> up;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string nid = name_of(all[i]);
    const auto& r = states[i];
    if (!r && r.status().code() == Code::kNotFound) {
      up.push_back(all[i]);  // up, without the step (a node that joined later)
      if (contains(c.from_nodes, nid)) c.down.push_back(nid);
    } else if (!r) {
      log::warn("repartition of {}: node {} is unreachable: {}", name, nid, r.status().to_string());
      c.down.push_back(nid);
    } else if (r->version != version) {
      return error(Code::kFailedPrecondition, "node " + nid + " has version " + std::to_string(r->version) + " of " +
                                                  name + ", this node " + std::to_string(version) +
                                                  " (a change is under way or a node missed one)");
    } else {
      up.push_back(all[i]);
    }
  }
  // A node of the old placement that is no member now (it left) serves nothing either.
  std::set<std::string> up_ids;
  for (int n : up) up_ids.insert(name_of(n));
  std::set<std::string> sources(c.from_nodes.begin(), c.from_nodes.end());
  for (const auto& h : c.from_holders) sources.insert(h.begin(), h.end());
  for (const auto& nid : sources)
    if (!up_ids.count(nid) && !contains(c.down, nid)) c.down.push_back(nid);
  for (const auto& nid : c.to_nodes)
    if (contains(c.down, nid) && !up_ids.count(nid))
      return error(Code::kUnavailable, "node " + nid +
                                           " is down but the new layout places ranks on it "
                                           "(leave it out with --nodes)");
  return up;
}

Result<RepartitionResult> Coordinator::repartition(const RepartitionRequest& req, const PhaseProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string name = req.job + "/" + req.step;
  PTC_ASSIGN_OR_RETURN(std::shared_ptr<const StepVersion> old, current_version(store_, req.job, req.step));
  const ptc::Layout& from = old->layout();
  RepartitionChange c;
  c.job = req.job;
  c.step = req.step;
  c.from_version = old->version();
  c.ptc = from.ptc();
  c.from_nodes = old->placement().nodes;
  // GPU counts pinned with the placement (a version from before they were kept: as now).
  c.from_gpus = old->placement().gpus.empty() ? ptc::gpus_of(*cluster(), c.from_nodes) : old->placement().gpus;
  c.from_holders = old->placement().holders;
  if (c.from_nodes.empty()) return error(Code::kFailedPrecondition, name + " was imported outside the cluster");
  c.to = req.to;
  c.global_batch = req.global_batch;
  c.to_nodes = placement_or_all(req.nodes);
  c.to_gpus = ptc::gpus_of(*cluster(), c.to_nodes);

  RepartitionResult res;
  PTC_ASSIGN_OR_RETURN(const ptc::Layout to, start_result(req, *old, res));
  // Every node re-splits the job's datasets in its prepare; refuse here when one cannot be.
  auto datasets = resplit_datasets(store_, req.job, req.to.dp, req.global_batch);
  if (!datasets) return datasets.status().with_context("cannot repartition " + name + " to " + req.to.to_string());
  note_datasets(*datasets, res);
  c.datasets = resplit_versions(*datasets);
  if (req.to == from.parallelism() && c.to_nodes == c.from_nodes && datasets->empty()) {
    res.unchanged = true;
    res.bytes_total = old->total_bytes();
    return res;
  }
  // What etcd records of the step, who is up, and at which version.
  PTC_ASSIGN_OR_RETURN(TwoPhase::Locked prior, two_phase_.lock(etcd_step_key(req.job, req.step)));
  if (prior.record() && prior.record()->version() != old->version())
    return error(Code::kFailedPrecondition, "etcd records version " + std::to_string(prior.record()->version()) +
                                                " of " + name + ", this node has " + std::to_string(old->version()) +
                                                " (it is catching up; try again in a moment)");
  if (progress) progress("state", 0, 1);
  PTC_ASSIGN_OR_RETURN(const std::vector<int> up, nodes_up(c, old->version()));

  if (progress) progress("plan", 0, 1);
  PTC_ASSIGN_OR_RETURN(const ptc::ClusterConfig table, change_table(c, *cluster()));
  PTC_ASSIGN_OR_RETURN(ptc::ClusterHoldings h, cluster_holdings(from, to, c, table));
  auto plan = ptc::make_cluster_plan(from, to, h);
  if (!plan) return plan.status().with_context("cannot repartition " + name);
  std::vector<uint64_t> min_per_node;
  res.bytes_min = ptc::min_transfer_bytes(from, to, h, &min_per_node);
  res.copies = plan->copies.size();
  res.fills = plan->fills.size();
  res.bytes_total = plan->bytes_total;
  res.bytes_fill = plan->bytes_fill;
  res.bytes_remapped = plan->bytes_local;
  if (req.dry_run) {
    res.bytes_moved = plan->bytes_remote;
    res.seconds = since(t0);
    return res;
  }

  c.digest = plan_digest(*plan);
  res.version = old->version() + 1;
  StepRecord record = step_record("repartition", res.version, c.to_nodes, c.to_gpus);
  record.parallelism = req.to.to_string();
  ChangeSpec spec{.what = "repartition of " + name,
                  .nodes = up,
                  .request = two_phase_.request(c),
                  .record = record,
                  .refused = "repartition of " + name + " aborted, the old layout stays",
                  .progress = progress};
  PTC_ASSIGN_OR_RETURN(const TwoPhase::Prepared done, two_phase_.run(prior, std::move(spec)));
  for (size_t i = 0; i < done.nodes.size(); ++i) {
    const std::string nid = name_of(done.nodes[i]);
    const uint64_t received = done.replies[i].bytes_received;
    const int in_table = table.find(nid);
    res.bytes_moved += received;
    res.per_node.push_back({nid, received, in_table < 0 ? 0 : min_per_node[static_cast<size_t>(in_table)]});
  }
  res.seconds = since(t0);
  log::info("repartitioned {} {} -> {} on {} nodes (version {}): {} bytes moved, {} the minimum, in {:.3f} s", name,
            res.from.to_string(), res.to.to_string(), up.size(), res.version, res.bytes_moved, res.bytes_min,
            res.seconds);
  return res;
}

Status Coordinator::remove(const RemoveRequest& req) {
  const std::string name = req.job + "/" + req.step;
  PTC_ASSIGN_OR_RETURN(TwoPhase::Locked prior, two_phase_.lock(etcd_step_key(req.job, req.step)));
  const std::vector<int> all = members_.members();
  const StepRecord record = step_record("remove", 0);
  ChangeSpec spec{.what = "removing " + name,
                  .nodes = all,
                  .request = two_phase_.request(RemoveChange{req.job, req.step}),
                  .record = record,
                  .refused = "removing " + name + ": nothing was removed"};
  PTC_RETURN_IF_ERROR(two_phase_.run(prior, std::move(spec)).status());
  log::info("removed {} on {} nodes", name, all.size());
  return Status::ok();
}

RunnerStatus Coordinator::status() {
  RunnerStatus out;
  out.cluster = true;
  out.self = id();
  out.membership = members_.describe();
  const std::vector<int> all = members_.members();
  auto stats = peers_.stats(all);
  const auto table = cluster();
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& n = table->nodes[static_cast<size_t>(all[i])];
    RunnerStatus::Node node;
    node.id = n.id;
    node.addr = n.addr;
    node.gpus = n.gpus;
    node.up = stats[i].is_ok();
    if (stats[i]) {
      node.bytes_sent = stats[i]->bytes_sent;
      node.bytes_received = stats[i]->bytes_received;
    } else {
      node.error = stats[i].status().message();
    }
    out.nodes.push_back(std::move(node));
  }
  return out;
}

}  // namespace ptcfs
