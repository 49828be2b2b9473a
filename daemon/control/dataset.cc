// The dataset requests of the control service: dataset.add, dataset.progress, dataset.ls
// (docs/FORMATS.md "Control protocol").
#include <filesystem>

#include "daemon/control/control.h"
#include "daemon/control/progress.h"
#include "daemon/control/results.h"
#include "daemon/dataset/dataset_ops.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "ptc/model.h"

namespace ptcfs {

using nlohmann::json;

namespace {

// A path inside `root` (after resolving symbolic links), or root itself.
bool inside(const std::string& path, const std::string& root) {
  if (root.empty()) return false;
  std::error_code ec;
  const auto p = std::filesystem::weakly_canonical(path, ec).string();
  const auto r = std::filesystem::weakly_canonical(root, ec).string();
  return p == r || p.rfind(r + "/", 0) == 0;
}

}  // namespace

Result<DatasetAddRequest> ControlService::parse_dataset_add(const json& req) const {
  PTC_RETURN_IF_ERROR(check_members(req, {"op", "job", "name", "format", "seed", "global_batch", "dp", "files", "copy"},
                                    "dataset.add request"));
  DatasetAddRequest r;
  PTC_ASSIGN_OR_RETURN(r.job, member_string(req, "job"));
  PTC_ASSIGN_OR_RETURN(r.name, member_string(req, "name"));
  PTC_RETURN_IF_ERROR(ptc::validate_id("job", r.job));
  PTC_RETURN_IF_ERROR(ptc::validate_id("dataset name", r.name));
  PTC_ASSIGN_OR_RETURN(std::string format, member_string(req, "format"));
  PTC_ASSIGN_OR_RETURN(r.format, ptc::parse_dataset_format(format));
  PTC_ASSIGN_OR_RETURN(r.seed, member_u64(req, "seed"));
  PTC_ASSIGN_OR_RETURN(r.global_batch, member_u64(req, "global_batch"));
  if (r.global_batch == 0) return invalid("the global batch must be at least 1");
  if (req.contains("dp")) {
    PTC_ASSIGN_OR_RETURN(int64_t dp, get_int(req["dp"], "request field 'dp'", 1, ptc::kMaxDatasetDp));
    r.dp = static_cast<int>(dp);
  }
  if (!req.contains("files") || !req["files"].is_array() || req["files"].empty())
    return invalid("request field 'files' must be a non-empty list of paths");
  for (const auto& f : req["files"]) {
    PTC_ASSIGN_OR_RETURN(std::string path, get_string(f, "request field 'files'"));
    if (path.empty() || path[0] != '/') return invalid("dataset file '" + path + "' is not an absolute path");
    if (inside(path, info_.mount) || inside(path, info_.data))
      return invalid("dataset file '" + path + "' lies inside this daemon's mount or data directory");
    r.files.push_back(std::move(path));
  }
  PTC_ASSIGN_OR_RETURN(r.copy, member_bool_or(req, "copy", false));
  return r;
}

Result<json> ControlService::dataset_add(const json& req, const transport::ProgressSink& progress) {
  PTC_ASSIGN_OR_RETURN(DatasetAddRequest r, parse_dataset_add(req));
  const bool given_dp = r.dp.has_value();
  if (!r.dp) {
    auto dp = job_dp(store_, r.job);
    if (!dp) return dp.status();
    r.dp = *dp;
  }
  ThrottledProgress report(progress);
  auto out = runner_.dataset_add(r, report.fn());
  if (!out) {
    log::warn("dataset add {}/{} refused: {}", r.job, r.name, out.status().to_string());
    return out.status();
  }
  log::info("added dataset {}/{}: {} samples (dp {}{})", r.job, r.name, out->version->spec().num_samples, *r.dp,
            given_dp ? ", given" : ", the job's");
  return to_json(*out);
}

Result<json> ControlService::dataset_progress(const json& req) {
  PTC_RETURN_IF_ERROR(check_members(req,
                                    {"op", "job", "name", "consumed", "epoch", "dp", "global_batch", "batch_offset"},
                                    "dataset.progress request"));
  DatasetProgressRequest r;
  PTC_ASSIGN_OR_RETURN(r.job, member_string(req, "job"));
  PTC_ASSIGN_OR_RETURN(r.name, member_string(req, "name"));
  PTC_ASSIGN_OR_RETURN(r.consumed, member_u64(req, "consumed"));
  if (req.contains("epoch")) {
    PTC_ASSIGN_OR_RETURN(r.epoch, member_u64(req, "epoch"));
  }
  if (req.contains("dp")) {
    PTC_ASSIGN_OR_RETURN(int64_t dp, get_int(req["dp"], "request field 'dp'", 1, ptc::kMaxDatasetDp));
    r.dp = static_cast<int>(dp);
  }
  if (req.contains("global_batch")) {
    PTC_ASSIGN_OR_RETURN(r.global_batch, member_u64(req, "global_batch"));
    if (r.global_batch == 0) return invalid("the global batch must be at least 1");
  }
  if (req.contains("batch_offset")) {
    PTC_ASSIGN_OR_RETURN(r.batch_offset, member_u64(req, "batch_offset"));
  }
  PTC_ASSIGN_OR_RETURN(std::shared_ptr<const DatasetVersion> next, runner_.dataset_progress(r));
  return dataset_json(*next);
}

Result<json> ControlService::dataset_ls(const json& req) const {
  PTC_RETURN_IF_ERROR(check_members(req, {"op", "job"}, "dataset.ls request"));
  std::string job;
  if (req.contains("job")) {
    PTC_ASSIGN_OR_RETURN(job, member_string(req, "job"));
  }
  json out = json::array();
  for (const auto& [key, v] : store_.snapshot()->datasets)
    if (job.empty() || key.first == job) out.push_back(dataset_json(*v));
  return json{{"datasets", std::move(out)}};
}

}  // namespace ptcfs
