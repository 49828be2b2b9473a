#include "daemon/reshard/repartition.h"

#include <chrono>
#include <ctime>

#include "daemon/dataset/dataset_ops.h"
#include "daemon/reshard/extent_map.h"
#include "daemon/store/prepared.h"
#include "ptc/base/log.h"
#include "ptc/plan.h"

namespace ptcfs {

using nlohmann::json;

void note_datasets(const std::vector<DatasetChange>& datasets, RepartitionResult& res) {
  for (const auto& d : datasets)
    res.datasets.push_back({d.next->name(), d.replaced->position().dp, d.next->position().dp,
                            d.replaced->spec().global_batch, d.next->spec().global_batch});
}

Result<std::shared_ptr<const StepVersion>> current_version(const Store& store, const std::string& job,
                                                           const std::string& step) {
  auto snap = store.snapshot();
  auto it = snap->steps.find({job, step});
  if (it != snap->steps.end()) return std::shared_ptr<const StepVersion>(it->second);
  // A job exists while it has a step or a dataset (what `ls` and the mount show).
  bool job_exists = false;
  for (const auto& [key, _] : snap->steps) job_exists = job_exists || key.first == job;
  for (const auto& [key, _] : snap->datasets) job_exists = job_exists || key.first == job;
  return not_found(job_exists ? "job '" + job + "' has no step '" + step + "'" : "no job '" + job + "'");
}

Result<ptc::Layout> start_result(const RepartitionRequest& req, const StepVersion& old, RepartitionResult& res) {
  const ptc::Layout& from = old.layout();
  res.job = req.job;
  res.step = req.step;
  res.from = from.parallelism();
  res.to = req.to;
  res.dry_run = req.dry_run;
  res.version = old.version();
  auto to = from.at(req.to);
  if (!to)
    return to.status().with_context("cannot repartition " + req.job + "/" + req.step + " to " + req.to.to_string());
  res.shards = to->shards().size();
  res.tensors = to->ptc().tensors.size();
  return to;
}

namespace {
// dp alone changed: dp places replicas of the same shards, which this node holds already. The
// new version's slices are the old ones, extent for extent; nothing is copied or planned.
// Counted as the plan would count it: a copy per piece of each slice, its padding a fill.
std::vector<std::vector<StoredSlice>> same_split_slices(const StepVersion& old, const ptc::Layout& to,
                                                        RepartitionResult& res) {
  std::vector<std::vector<StoredSlice>> stored(to.shards().size());
  for (size_t i = 0; i < to.shards().size(); ++i) {
    const auto& slices = to.slices(to.shards()[i]);
    stored[i].reserve(slices.size());
    for (size_t j = 0; j < slices.size(); ++j) {
      stored[i].push_back(old.stored(to.shards()[i], j));
      const uint64_t bytes = to.bytes(slices[j]);
      uint64_t data = 0;
      for (const auto& pc : slices[j].pieces)
        data += static_cast<uint64_t>(pc.local.num_elements()) * ptc::dtype_size(to.tensor(slices[j]).dtype);
      res.copies += slices[j].pieces.size();
      res.bytes_total += bytes;
      if (data < bytes) {
        ++res.fills;
        res.bytes_fill += bytes - data;
      }
    }
  }
  return stored;
}
}  // namespace

Result<RepartitionResult> repartition(Store& store, const RepartitionRequest& req, const CompactionPolicy& policy,
                                      const PhaseProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  auto report = [&](const char* phase, uint64_t done, uint64_t total) {
    if (progress) progress(phase, done, total);
  };
  const std::string name = req.job + "/" + req.step;
  PTC_ASSIGN_OR_RETURN(std::shared_ptr<const StepVersion> old, current_version(store, req.job, req.step));
  if (!old->placement().nodes.empty())
    return error(Code::kFailedPrecondition, name + " is placed on a cluster: repartition it through a cluster daemon");
  const ptc::Layout& from = old->layout();

  RepartitionResult res;
  PTC_ASSIGN_OR_RETURN(ptc::Layout to, start_result(req, *old, res));
  // The job's datasets follow its dp; a dp that does not divide a global batch refuses all.
  auto datasets = resplit_datasets(store, req.job, req.to.dp, req.global_batch);
  if (!datasets) return datasets.status().with_context("cannot repartition " + name + " to " + req.to.to_string());
  note_datasets(*datasets, res);
  if (req.to == from.parallelism()) {
    res.unchanged = true;
    res.bytes_total = old->total_bytes();
    if (!req.dry_run && !datasets->empty()) {
      PreparedChange change(store);
      change.datasets = std::move(datasets).value();
      PTC_RETURN_IF_ERROR(change.claim_datasets(store));
      PTC_RETURN_IF_ERROR(commit_change(store, change));
    }
    return res;
  }

  std::vector<std::vector<StoredSlice>> stored;
  if (ptc::Layout::same_split(from, to)) {
    stored = same_split_slices(*old, to, res);
  } else {
    report("plan", 0, 1);
    PTC_ASSIGN_OR_RETURN(ptc::Plan plan, ptc::make_plan(from, to, ptc::Holdings::single_node(from, to)));
    res.copies = plan.copies.size();
    res.fills = plan.fills.size();
    res.bytes_total = plan.bytes_total;
    res.bytes_fill = plan.bytes_fill;
    report("map", 0, 1);
    stored = map_extents(from, to, plan, [&](uint32_t shard, uint32_t slice) -> const StoredSlice& {
      return old->stored(from.shards()[shard], slice);
    });
  }
  PTC_ASSIGN_OR_RETURN(Selection selection,
                       select_compaction(stored, policy, [&](uint64_t id) { return store.blobs().size_of(id); }));
  // Counted as they will be after compaction: a compacted slice is one extent; its bytes
  // from blobs are copied (its padding is counted in bytes_fill).
  const CompactionStats cs = compaction_stats(stored, selection);
  res.extents = cs.extents;
  res.compacted_slices = cs.slices;
  res.bytes_compacted = cs.bytes_from_blobs;
  res.bytes_remapped = res.bytes_total - res.bytes_fill - res.bytes_compacted;
  if (req.dry_run) {
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  }

  // Built beside the old version and committed through the one commit path
  // (daemon/store/prepared.h), as a cluster node's part is.
  PreparedChange change(store);
  PTC_RETURN_IF_ERROR(change.claim(store, Claim::kChangeStep, req.job, req.step));
  change.replaced = old;
  change.datasets = std::move(datasets).value();
  PTC_RETURN_IF_ERROR(change.claim_datasets(store));
  // On error compaction removes what it wrote, and the change releases its claim.
  PTC_ASSIGN_OR_RETURN(CompactionResult comp, compact(store.blobs(), stored, selection, policy,
                                                      [&](uint64_t d, uint64_t t) { report("compact", d, t); }));
  for (const auto& w : comp.blobs) change.blobs.push_back(w.id());
  report("commit", 0, 1);
  auto next =
      store.new_version(req.job, req.step, old->version() + 1, std::move(to), std::move(stored), old->placement());
  change.next = next;
  old.reset();  // the change holds it until the commit; then its blobs may go
  PTC_RETURN_IF_ERROR(commit_change(store, change));
  res.version = next->version();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info(
      "repartitioned {} {} -> {} (version {}): {} copies, {} extents, {} bytes remapped, {} compacted "
      "in {:.3f} s",
      name, res.from.to_string(), res.to.to_string(), res.version, res.copies, res.extents, res.bytes_remapped,
      res.bytes_compacted, res.seconds);
  return res;
}

}  // namespace ptcfs
