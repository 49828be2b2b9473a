// Saves into the mounts of a cluster, the coordinator's half (daemon/cluster/coordinator.h).
#include <algorithm>
#include <map>
#include <optional>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/nodes.h"
#include "ptc/base/log.h"

namespace ptcfs {

Status Coordinator::save_commit(const SaveCommitRequest& req) {
  // The first member decides saves (the first node of cluster.json, or the live node with
  // the smallest id).
  const auto members = members_.members();
  if (members.empty()) return Status::ok();
  const int decider = members.front();
  if (peers_.self() == decider) {
    commit_save(req.job, req.step);
    return Status::ok();
  }
  auto s = peers_.save_ready(decider, SaveReadyRequest{req.job, req.step});
  if (!s)
    log::warn("save of {}/{}: could not reach node {} to commit it: {}", req.job, req.step, name_of(decider),
              s.to_string());
  return Status::ok();  // the word comes again (every part says it every 5 s)
}

void Coordinator::commit_save(const std::string& job, const std::string& step) {
  std::lock_guard serial(save_mu_);
  const std::string name = job + "/" + step;
  if (store_.snapshot()->steps.count({job, step})) return;  // committed already
  auto prior = two_phase_.lock(etcd_step_key(job, step));
  if (!prior) {
    log::warn("save of {}: {}; waiting", name, prior.status().to_string());
    return;
  }
  const std::vector<int> all = members_.members();
  const auto answers = peers_.save_state(all, SaveStateRequest{job, step});
  std::vector<SaveState> states;
  std::optional<uint64_t> digest;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string nid = name_of(all[i]);
    const auto& st = answers[i];
    if (!st) {
      log::info("save of {}: node {} does not answer ({}); waiting", name, nid, st.status().to_string());
      return;
    }
    if (st->pending) {
      if (!st->ready) return;  // that node's part is not done: its own save_ready comes later
      if (digest && *digest != st->ptc_digest) {
        log::error("save of {}: node {} has another ptc.json than the others; the step stays pending", name, nid);
        return;
      }
      digest = st->ptc_digest;
    }
    states.push_back(*st);
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
  // Replicas of a shard must hold the same bytes.
  auto same_replicas = [&](const std::vector<int>& nodes, const std::vector<PrepareReply>& replies) {
    std::map<std::string, std::pair<uint64_t, std::string>> digests;  // shard -> (digest, first node)
    for (size_t i = 0; i < nodes.size(); ++i)
      for (const auto& [shard, d] : replies[i].shard_digests) {
        auto [it, fresh] = digests.emplace(shard, std::make_pair(d, name_of(nodes[i])));
        if (!fresh && it->second.first != d)
          return invalid("shard " + shard + " of " + name + " differs between nodes " + it->second.second + " and " +
                         name_of(nodes[i]) + " (replicas must hold the same bytes; remove the step and save it again)");
      }
    return Status::ok();
  };
  StepRecord record = step_record("save", 1);
  record.holders = holders;
  ChangeSpec spec{.what = "save of " + name,
                  .nodes = all,
                  .request = two_phase_.request(SaveChange{job, step, *ptc, holders}),
                  .check = same_replicas,
                  .record = record};
  if (auto done = two_phase_.run(*prior, std::move(spec)); !done) {
    log::error("save of {}: {}", name, done.status().to_string());
    return;
  }
  log::info("saved {} across {} nodes: {} shards, committed as version 1", name, all.size(), layout->shards().size());
}

}  // namespace ptcfs
