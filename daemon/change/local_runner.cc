#include "daemon/change/local_runner.h"

#include <chrono>

#include "daemon/reshard/hf_import.h"
#include "daemon/reshard/importer.h"
#include "daemon/store/prepared.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"

namespace ptcfs {

namespace {

Status no_nodes(const std::vector<std::string>& nodes) {
  if (!nodes.empty()) return invalid("--nodes needs a daemon in a cluster");
  return Status::ok();
}

ImportResult result_of(const ImportSummary& s) {
  ImportResult r;
  r.job = s.job;
  r.step = s.step;
  r.shards = s.shards;
  r.tensors = s.tensors;
  r.bytes = s.bytes;
  r.seconds = s.seconds;
  return r;
}

}  // namespace

Result<ImportResult> LocalRunner::import(const ImportRequest& req, const PhaseProgress& progress) {
  PTC_RETURN_IF_ERROR(no_nodes(req.nodes));
  if (req.hf) return import_hf(req, progress);
  PTC_ASSIGN_OR_RETURN(auto src, sources_.open(req.dir));
  PTC_ASSIGN_OR_RETURN(ImportSummary s,
                       import_checkpoint(store_, *src, req.job, req.step, [&](uint64_t done, uint64_t total) {
                         if (progress) progress("copy", done, total);
                       }));
  ImportResult r = result_of(s);
  PTC_RETURN_IF_ERROR(then_repartition(req, "the layout of " + req.dir, r, progress));
  return r;
}

Status LocalRunner::then_repartition(const ImportRequest& req, const std::string& imported_at, ImportResult& r,
                                     const PhaseProgress& progress) {
  if (!req.then) return Status::ok();
  // Straight into the asked layout: a repartition of the new step, which remaps (no copy).
  auto res =
      ptcfs::repartition(store_, RepartitionRequest{req.job, req.step, *req.then, false, {}, 0}, policy_, progress);
  if (!res)
    return res.status().with_context("imported " + req.job + "/" + req.step + " in " + imported_at + ", but " +
                                     "the repartition to " + req.then->to_string() + " failed");
  r.repartition = std::move(res).value();
  r.shards = static_cast<size_t>(req.then->tp * req.then->pp);
  return Status::ok();
}

Result<ImportResult> LocalRunner::import_hf(const ImportRequest& req, const PhaseProgress& progress) {
  PTC_ASSIGN_OR_RETURN(auto src, sources_.open(req.dir));
  PTC_ASSIGN_OR_RETURN(ImportSummary s, ptcfs::import_hf(store_, *src, *req.hf, req.job, req.step, req.then,
                                                         [&](uint64_t done, uint64_t total) {
                                                           if (progress) progress("copy", done, total);
                                                         }));
  ImportResult r = result_of(s);
  r.format = "hf";
  r.template_name = req.hf->name;
  PTC_RETURN_IF_ERROR(then_repartition(req, "the layout tp=1,pp=1,dp=1", r, progress));
  return r;
}

Result<RepartitionResult> LocalRunner::repartition(const RepartitionRequest& req, const PhaseProgress& progress) {
  PTC_RETURN_IF_ERROR(no_nodes(req.nodes));
  return ptcfs::repartition(store_, req, policy_, progress);
}

Status LocalRunner::remove(const RemoveRequest& req) {
  PTC_ASSIGN_OR_RETURN(PreparedChange change, prepare_removal(store_, req.job, req.step));
  PTC_RETURN_IF_ERROR(commit_change(store_, change));
  log::info("removed step {}/{}", req.job, req.step);
  return Status::ok();
}

Result<DatasetAddResult> LocalRunner::dataset_add(const DatasetAddRequest& req, const PhaseProgress& progress) {
  if (!req.dp) return internal("dataset add of " + req.job + "/" + req.name + " without a dp");
  DatasetAddResult out;
  PTC_ASSIGN_OR_RETURN(PreparedChange change,
                       prepare_dataset_add(store_, req, *req.dp, "", out.summary, [&](uint64_t done, uint64_t total) {
                         if (progress) progress("index", done, total);
                       }));
  out.version = change.datasets.front().next;
  PTC_RETURN_IF_ERROR(commit_change(store_, change));
  return out;
}

Result<std::shared_ptr<const DatasetVersion>> LocalRunner::dataset_progress(const DatasetProgressRequest& req) {
  PTC_ASSIGN_OR_RETURN(PreparedChange change,
                       prepare_dataset_progress(store_, req.job, req.name, req.epoch, req.consumed, {}, req.dp,
                                                req.global_batch, req.batch_offset));
  PTC_RETURN_IF_ERROR(change.claim_datasets(store_));
  std::shared_ptr<const DatasetVersion> next = change.datasets.front().next;
  PTC_RETURN_IF_ERROR(commit_change(store_, change));
  return next;
}

Status LocalRunner::save_commit(const SaveCommitRequest& req) {
  // As every change: the save service prepares the version, the one commit path commits it, and
  // the service hears how it went (a failed commit leaves the step pending and failed: ls says
  // why; remove it with ptcfs rm).
  const SaveService::PartState state = saves_.part_state(req.job, req.step);
  if (!state.pending || !state.whole) return Status::ok();  // committed, removed, or not complete
  const std::string name = req.job + "/" + req.step;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  auto change = saves_.prepare_part(req.job, req.step, StepPlacement{});
  if (!change) {
    log::error("committing {}: {}; the step stays pending (remove it with ptcfs rm)", name,
               change.status().to_string());
    metrics::operation("save", false, seconds(), 0);
    return change.status();
  }
  const size_t shards = change->next->layout().shards().size();
  const size_t tensors = change->next->layout().ptc().tensors.size();
  const Status committed = commit_change(store_, *change);
  saves_.part_done(req.job, req.step, committed.is_ok(), committed.is_ok() ? "" : committed.message());
  if (!committed) {
    log::error("committing {}: {}", name, committed.to_string());
    metrics::operation("save", false, seconds(), 0);
    return committed;
  }
  metrics::operation("save", true, seconds(), state.bytes);
  log::info("saved {}: {} shards, {} tensors, {} bytes, committed as version 1", name, shards, tensors, state.bytes);
  return Status::ok();
}

}  // namespace ptcfs
