// Datasets on a cluster, the coordinator's half (daemon/cluster/coordinator.h):
//
// - add: the node the CLI talks to holds the files (its "home"). It indexes them into a
//   pending sample table; every other node pulls that table (peer.dataset_table, verified
//   by its XXH3) and records the dataset with the same home; then all commit, or none.
// - progress: every reachable node prepares the new position, then all commit.
// - catch-up (the follower's, daemon/cluster/follower.h): a node that was down takes the
//   newest position from its peers.
// Reads of samples held by the home are the peer reader's (daemon/cluster/peer_reader.h).
#include "daemon/cluster/change_record.h"
#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/nodes.h"
#include "ptc/base/log.h"

namespace ptcfs {

Result<DatasetAddResult> Coordinator::dataset_add(const DatasetAddRequest& req, const PhaseProgress& progress) {
  if (!req.dp) return internal("dataset add of " + req.job + "/" + req.name + " without its dp");
  const std::string name = req.job + "/" + req.name;
  const std::string key = etcd_dataset_key(req.job, req.name);
  PTC_ASSIGN_OR_RETURN(TwoPhase::Locked prior, two_phase_.lock(key));
  DatasetAddResult res;
  IndexProgress indexed;
  if (progress) indexed = [&](uint64_t done, uint64_t total) { progress("index", done, total); };
  PTC_ASSIGN_OR_RETURN(PreparedChange mine, prepare_dataset_add(store_, req, *req.dp, id(), res.summary, indexed));
  res.version = mine.datasets.front().next;
  // This node holds its part (the others pull the sample table from it while they prepare).
  const PrepareRequest prepare = two_phase_.request(DatasetAddChange{req.job, req.name, res.version->to_json()});
  local_.hold(prepare.tx, std::move(mine), key);
  ChangeSpec spec{.what = "adding dataset " + name,
                  .nodes = members_.members(),
                  .held = {peers_.self()},
                  .request = prepare,
                  .record = dataset_record("dataset_add", 0),
                  .refused = "dataset " + name + " added on no node"};
  res.nodes = spec.nodes.size();
  PTC_RETURN_IF_ERROR(two_phase_.run(prior, std::move(spec)).status());
  return res;
}

Result<std::shared_ptr<const DatasetVersion>> Coordinator::dataset_progress(const DatasetProgressRequest& req) {
  const std::string name = req.job + "/" + req.name;
  PTC_ASSIGN_OR_RETURN(auto cur, current_dataset(store_, req.job, req.name));
  // Validate here first: a bad request is refused before any node is asked.
  PTC_ASSIGN_OR_RETURN(PreparedChange check,
                       prepare_dataset_progress(store_, req.job, req.name, req.epoch, req.consumed, {}, req.dp,
                                                req.global_batch, req.batch_offset));
  PTC_ASSIGN_OR_RETURN(TwoPhase::Locked prior, two_phase_.lock(etcd_dataset_key(req.job, req.name)));
  const uint64_t epoch = req.epoch.value_or(cur->position().epoch);
  // A node that cannot be reached catches up when it comes back; any other failure aborts.
  ChangeSpec spec{
      .what = "progress of dataset " + name,
      .nodes = members_.members(),
      .quorum = ChangeSpec::Quorum::kReachable,
      .request = two_phase_.request(DatasetProgressChange{req.job, req.name, cur->version(), epoch, req.consumed,
                                                          req.dp, req.global_batch, req.batch_offset}),
      .record = dataset_record("dataset_progress", cur->version() + 1),
      .refused = "progress of dataset " + name + " refused; nothing changed"};
  PTC_RETURN_IF_ERROR(two_phase_.run(prior, std::move(spec)).status());
  return check.datasets.front().next;
}

}  // namespace ptcfs
