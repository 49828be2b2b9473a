// Saves into the mounts of a cluster, the coordinator's half (daemon/cluster/coordinator.h).
#include <algorithm>
#include <map>
#include <optional>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/nodes.h"
#include "ptc/base/log.h"

namespace ptcfs {

using nlohmann::json;

ptc::Status Coordinator::save_commit(const SaveCommitRequest& req) {
  // The first member decides saves (the first node of cluster.json, or the live node with
  // the smallest id).
  const std::string &job = req.job, &step = req.step;
  const auto members = members_.members();
  if (members.empty()) return ptc::Status::ok();
  const int decider = members.front();
  if (self_ == decider) {
    commit_save(job, step);
    return ptc::Status::ok();
  }
  auto r = peers_.call(decider, json{{"op", "peer.save_ready"}, {"job", job}, {"step", step}});
  if (!r)
    ptc::log::warn("save of {}/{}: could not reach node {} to commit it: {}", job, step, name_of(decider),
                   r.status().to_string());
  return ptc::Status::ok();
}

void Coordinator::commit_save(const std::string& job, const std::string& step) {
  std::lock_guard serial(save_mu_);
  const std::string name = job + "/" + step;
  if (store_.snapshot()->steps.count({job, step})) return;  // committed already
  auto prior = record_before_change(step_key(job, step));
  if (!prior) {
    ptc::log::warn("save of {}: {}; waiting", name, prior.status().to_string());
    return;
  }
  const std::vector<int> all = members_.members();
  const auto answers = ask_all(all, [&](int) { return json{{"op", "peer.save_state"}, {"job", job}, {"step", step}}; });
  std::vector<SaveState> states;
  std::optional<uint64_t> digest;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string nid = name_of(all[i]);
    auto st = answers[i] ? save_state_from_json(*answers[i], "save state of node " + nid) : answers[i].status();
    if (!st) {
      ptc::log::info("save of {}: node {} does not answer ({}); waiting", name, nid, st.status().to_string());
      return;
    }
    if (st->pending) {
      if (!st->ready) return;  // that node's part is not done: its own save_ready comes later
      if (digest && *digest != st->ptc_digest) {
        ptc::log::error("save of {}: node {} has another ptc.json than the others; the step stays pending", name, nid);
        return;
      }
      digest = st->ptc_digest;
    }
    states.push_back(std::move(st).value());
  }
  if (!digest) return;  // nobody saves it
  // The layout, from the ptc.json of a node that writes the step (they all agree).
  std::optional<ptc::Ptc> ptc;
  for (const auto& st : states)
    if (st.pending && st.ptc) ptc = st.ptc;
  if (!ptc) return;
  auto layout = ptc::Layout::make(*ptc, ptc->parallelism);
  if (!layout) return;
  std::vector<std::vector<std::string>> holders(layout->shards().size());
  for (size_t i = 0; i < all.size(); ++i)
    for (const auto& shard : states[i].complete) {
      const auto id = ptc::parse_shard_name(shard);
      const auto& sh = layout->shards();
      const auto it = id ? std::find(sh.begin(), sh.end(), *id) : sh.end();
      if (it != sh.end()) holders[static_cast<size_t>(it - sh.begin())].push_back(name_of(all[i]));
    }
  for (size_t s = 0; s < holders.size(); ++s)
    if (holders[s].empty()) return;  // not covered yet: the node that writes the rest calls again
  const std::string tx = new_transaction_id();
  const json prepare = to_json(request(tx, SaveChange{job, step, *ptc, holders}));
  const auto prepared = ask_all(all, [&](int) { return prepare; });
  ptc::Status failed;
  std::map<std::string, std::pair<uint64_t, std::string>> digests;  // shard -> (digest, first node)
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string nid = name_of(all[i]);
    auto r = prepared[i] ? prepare_reply_from_json(*prepared[i], "prepare reply of node " + nid) : prepared[i].status();
    if (!r) {
      if (failed.is_ok()) failed = r.status();
      continue;
    }
    for (const auto& [shard, d] : r->shard_digests) {
      auto [it, fresh] = digests.emplace(shard, std::make_pair(d, nid));
      if (!fresh && it->second.first != d && failed.is_ok())
        failed = ptc::invalid("shard " + shard + " of " + name + " differs between nodes " + it->second.second +
                              " and " + nid + " (replicas must hold the same bytes; remove the step and save it again)");
    }
  }
  if (!failed.is_ok()) {
    (void)finish_all(all, tx, false);
    ptc::log::error("save of {} aborted on every node: {}", name, failed.to_string());
    return;
  }
  if (auto s = decide(all, tx, step_key(job, step), *prior, json{{"kind", "save"}, {"version", 1}, {"holders", holders}},
                      "save of " + name);
      !s) {
    ptc::log::error("{}", s.to_string());
    return;
  }
  ptc::log::info("saved {} across {} nodes: {} shards, committed as version 1", name, all.size(),
                 layout->shards().size());
}

}  // namespace ptcfs
