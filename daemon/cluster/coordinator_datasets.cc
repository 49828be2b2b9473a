// Datasets on a cluster, the coordinator's half (daemon/cluster/coordinator.h):
//
// - add: the node the CLI talks to holds the files (its "home"). It indexes them into a
//   pending sample table; every other node pulls that table (peer.dataset_table, verified
//   by its XXH3) and records the dataset with the same home; then all commit, or none.
// - progress: every reachable node prepares the new position, then all commit.
// - catch-up: a node that was down takes the newest position from its peers.
// Reads of samples held by the home are the peer reader's (daemon/cluster/peer_reader.h).
#include "daemon/cluster/change_record.h"
#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/nodes.h"
#include "ptc/base/log.h"

namespace ptcfs {

using nlohmann::json;

ptc::Result<DatasetAddResult> Coordinator::dataset_add(const DatasetAddRequest& req, const PhaseProgress& progress) {
  if (!req.dp) return ptc::internal("dataset add of " + req.job + "/" + req.name + " without a dp");
  const int dp = *req.dp;
  const std::string name = req.job + "/" + req.name;
  PTC_ASSIGN_OR_RETURN(Locked prior, record_before_change(dataset_key(req.job, req.name)));
  const std::vector<int> all = members_.members();
  DatasetAddResult out;
  PTC_ASSIGN_OR_RETURN(PreparedChange mine,
                       prepare_dataset_add(store_, req, dp, id(), out.summary, [&](uint64_t done, uint64_t total) {
                         if (progress) progress("index", done, total);
                       }));
  out.version = mine.datasets.front().next;
  const json record = out.version->to_json();
  const std::string tx = new_transaction_id();
  local_.hold(tx, std::move(mine), dataset_key(req.job, req.name));
  const json prepare = to_json(request(tx, DatasetAddChange{req.job, req.name, record}));
  const auto answers = ask_all(others(), [&](int) { return prepare; });
  for (const auto& a : answers) {
    if (a) continue;
    (void)finish_all(all, tx, false);
    return a.status().with_context("dataset " + name + " added on no node");
  }
  PTC_RETURN_IF_ERROR(decide(all, tx, dataset_key(req.job, req.name), prior, json{{"kind", "dataset_add"}},
                             "adding dataset " + name));
  out.nodes = all.size();
  return out;
}

ptc::Result<std::shared_ptr<const DatasetVersion>> Coordinator::dataset_progress(const DatasetProgressRequest& req) {
  const std::string &job = req.job, &name = req.name;
  const std::optional<uint64_t> epoch = req.epoch;
  const uint64_t consumed = req.consumed;
  PTC_ASSIGN_OR_RETURN(auto cur, current_dataset(store_, job, name));
  // Validate here first: a bad request is refused before any node is asked.
  PTC_ASSIGN_OR_RETURN(PreparedChange check, prepare_dataset_progress(store_, job, name, epoch, consumed));
  const std::shared_ptr<const DatasetVersion> next = check.datasets.front().next;
  PTC_ASSIGN_OR_RETURN(Locked prior, record_before_change(dataset_key(job, name)));
  const std::vector<int> all = members_.members();
  const std::string tx = new_transaction_id();
  const json prepare = to_json(request(
      tx, DatasetProgressChange{job, name, cur->version(), epoch.value_or(cur->position().epoch), consumed}));
  const auto answers = ask_all(all, [&](int) { return prepare; });
  // A node that cannot be reached catches up when it comes back; any other failure aborts.
  std::vector<int> prepared;
  ptc::Status failed;
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& r = answers[i];
    const ptc::Code code = r.status().code();
    if (r) prepared.push_back(all[i]);
    else if ((code == ptc::Code::kUnavailable || code == ptc::Code::kDeadlineExceeded) && all[i] != self_)
      ptc::log::warn("dataset progress of {}/{}: node {} is unreachable: {}", job, name, name_of(all[i]),
                     r.status().to_string());
    else if (failed.is_ok()) failed = r.status();
  }
  if (!failed.is_ok()) {
    (void)finish_all(prepared, tx, false);
    return failed.with_context("progress of dataset " + job + "/" + name + " refused; nothing changed");
  }
  PTC_RETURN_IF_ERROR(decide(prepared, tx, dataset_key(job, name), prior,
                             json{{"kind", "dataset_progress"}, {"version", cur->version() + 1}},
                             "progress of dataset " + job + "/" + name));
  return next;
}

size_t Coordinator::catch_up_datasets() {
  const std::vector<int> peers = others();
  size_t caught = 0;
  const auto snap = store_.snapshot();
  for (const auto& [key, v] : snap->datasets) {
    const std::string name = key.first + "/" + key.second;
    const auto answers = ask_all(peers, [&](int) {
      return json{{"op", "peer.dataset_state"}, {"job", key.first}, {"name", key.second}};
    });
    std::optional<DatasetState> newest;
    for (size_t i = 0; i < answers.size(); ++i) {
      if (!answers[i]) continue;
      auto s = dataset_state_from_json(*answers[i], "state of dataset " + name + " from node " + name_of(peers[i]));
      if (!s || s->table_xxh3 != v->source().table_xxh3()) continue;
      if (s->version > (newest ? newest->version : v->version())) newest = *s;
    }
    if (!newest) continue;
    ptc::DatasetPosition pos;
    pos.dp = static_cast<int>(newest->dp);
    pos.epoch = newest->epoch;
    pos.consumed = newest->consumed;
    if (!ptc::check_position(v->spec(), pos)) continue;
    // Take the peers' version number, so later changes agree on it.
    PreparedChange change;
    change.datasets = {{v->with_position(pos, newest->version), v}};
    if (auto s = commit_change(store_, change); !s) {
      ptc::log::warn("catching up dataset {}: {}", name, s.to_string());
      continue;
    }
    ptc::log::info("dataset {} moved to version {} while this node was down; caught up", name, newest->version);
    ++caught;
  }
  return caught;
}

}  // namespace ptcfs
