// The control service (daemon/control/control.h): the request handlers of status, ls, rm,
// import and repartition; the dataset requests are in daemon/control/dataset.cc.
#include "daemon/control/control.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <set>

#include "daemon/control/chunk_request.h"
#include "daemon/control/progress.h"
#include "daemon/control/results.h"
#include "daemon/reshard/repartition.h"
#include "daemon/save/dcp_import.h"
#include "ptc/formats/ptc_template.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"

namespace ptcfs {

using nlohmann::json;

namespace {

// Step names that are numbers sort numerically ("9" before "10"), others after, by text.
bool step_less(const std::string& a, const std::string& b) {
  auto numeric = [](const std::string& s) { return !s.empty() && std::all_of(s.begin(), s.end(), ::isdigit); };
  const bool na = numeric(a), nb = numeric(b);
  if (na != nb) return na;
  if (na && a.size() != b.size()) return a.size() < b.size();
  return a < b;
}

// Operations that change state are counted and timed (docs/OPERATIONS.md); reads (status,
// ls) are not. A dry run moves nothing.
void record_metrics(const std::string& op, const json& req, const Result<json>& r, double seconds) {
  static const std::set<std::string> kChanges = {"import", "repartition", "rm", "dataset.add", "dataset.progress"};
  if (!kChanges.count(op)) return;
  // Read without throwing: a request whose dry_run is not a boolean was refused by its parser,
  // and that refusal is what the client gets.
  const auto dry_it = req.is_object() ? req.find("dry_run") : req.end();
  const bool dry = req.is_object() && dry_it != req.end() && dry_it->is_boolean() && dry_it->get<bool>();
  uint64_t bytes = 0;
  if (r && r->is_object()) {
    for (const char* k : {"bytes", "bytes_total"})
      if (auto it = r->find(k); it != r->end() && it->is_number_unsigned()) {
        bytes = it->get<uint64_t>();
        break;
      }
    if (op == "repartition" && !dry) {
      const auto moved = r->find("bytes_moved"), min = r->find("bytes_min");
      if (moved != r->end() && min != r->end() && moved->is_number_unsigned() && min->is_number_unsigned())
        metrics::repartition_bytes(moved->get<uint64_t>(), min->get<uint64_t>());
    }
  }
  metrics::operation(dry ? op + ".dry_run" : op, static_cast<bool>(r), seconds, dry ? 0 : bytes);
}

}  // namespace

Result<transport::Reply> ControlService::handle(const json& req, const transport::ProgressSink& progress) {
  PTC_ASSIGN_OR_RETURN(const std::string op, member_string(req, "op"));
  const auto start = std::chrono::steady_clock::now();
  Result<json> r = invalid("unknown operation '" + op + "'");
  if (op == "status")
    r = status();
  else if (op == "ls")
    r = ls(req);
  else if (op == "rm")
    r = rm(req);
  else if (op == "import")
    r = import(req, progress);
  else if (op == "repartition")
    r = repartition(req, progress);
  else if (op == "dataset.add")
    r = dataset_add(req, progress);
  else if (op == "dataset.progress")
    r = dataset_progress(req);
  else if (op == "dataset.ls")
    r = dataset_ls(req);
  record_metrics(op, req, r, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!r) return r.status();
  return transport::Reply(std::move(r).value());
}

Result<json> ControlService::status() const {
  auto snap = store_.snapshot();
  std::set<std::string> jobs;
  uint64_t bytes = 0;
  for (const auto& [key, v] : snap->steps) {
    jobs.insert(key.first);
    bytes += v->total_bytes();
  }
  const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  json out = {{"version", PTCFS_VERSION}, {"data", info_.data},  {"mount", info_.mount},
              {"listen", info_.listen},   {"jobs", jobs.size()}, {"steps", snap->steps.size()},
              {"bytes_stored", bytes},    {"uptime_s", up}};
  add_status(runner_.status(), out);
  if (tier_) out["s3_durable"] = tier_->where();
  if (const auto& s3 = transport::S3Client::totals(); s3.requests.load())
    out["s3"] = json{{"requests", s3.requests.load()},
                     {"retries", s3.retries.load()},
                     {"bytes_sent", s3.bytes_sent.load()},
                     {"bytes_received", s3.bytes_received.load()}};
  return out;
}

Result<json> ControlService::ls(const json& req) const {
  PTC_RETURN_IF_ERROR(check_members(req, {"op", "path"}, "ls request"));
  PTC_ASSIGN_OR_RETURN(const std::string path, member_string_or(req, "path", ""));
  auto snap = store_.snapshot();
  std::map<std::string, std::vector<std::string>> jobs;
  std::map<std::string, std::vector<std::string>> datasets, pending;
  for (const auto& [key, v] : snap->steps) jobs[key.first].push_back(key.second);
  for (const auto& [key, v] : snap->datasets) {
    jobs[key.first];
    datasets[key.first].push_back(key.second);
  }
  const std::vector<SaveService::Progress> saving = saves_.pending();
  for (const auto& j : saves_.jobs()) jobs[j];
  for (const auto& p : saving) {
    if (snap->steps.count({p.job, p.step})) continue;  // committed meanwhile
    jobs[p.job].push_back(p.step);
    pending[p.job].push_back(p.step);
  }
  for (auto& [_, steps] : jobs) std::sort(steps.begin(), steps.end(), step_less);
  auto job_json = [&](const std::string& job, const std::vector<std::string>& steps) {
    json j{{"job", job}, {"steps", steps}, {"datasets", datasets[job]}, {"pending", pending[job]}};
    if (tier_) {  // each committed step's durability (the write-through S3 tier)
      json d = json::object();
      for (const auto& step : steps)
        if (snap->steps.count({job, step}))
          d[step] = durable::state_name(tier_->state(job, step).value_or(durable::StepDurability{}).state);
      j["durable"] = std::move(d);
    }
    return j;
  };
  if (path.empty()) {
    json out = json::array();
    for (const auto& [job, steps] : jobs) out.push_back(job_json(job, steps));
    return json{{"jobs", std::move(out)}};
  }
  const size_t slash = path.find('/');
  const std::string job = path.substr(0, slash);
  auto it = jobs.find(job);
  if (it == jobs.end()) return not_found("no job '" + job + "'");
  if (slash == std::string::npos) return job_json(job, it->second);
  const std::string step = path.substr(slash + 1);
  auto sit = snap->steps.find({job, step});
  if (sit != snap->steps.end()) {
    json out = step_json(*sit->second);
    out["state"] = "committed";
    if (tier_) {
      out["durable"] = to_json(tier_->state(job, step).value_or(durable::StepDurability{}));
      out["durable"]["where"] = tier_->where() + durable::step_prefix(job, step);
      // Its blobs the disk budget evicted (docs/OPERATIONS.md "A disk budget"): in S3 only.
      uint64_t evicted = 0;
      for (uint64_t b : sit->second->blobs_used())
        if (store_.blobs().is_evicted(b)) evicted += store_.blobs().size_of(b).value_or(0);
      out["durable"]["bytes_evicted"] = evicted;
    }
    return out;
  }
  if (auto p = saves_.progress(job, step))
    return json{{"job", job},
                {"step", step},
                {"state", "pending"},
                {"bytes_written", p->bytes_written},
                {"bytes_total", p->bytes_total},
                {"files", p->files},
                {"errors", p->errors}};
  return not_found("job '" + job + "' has no step '" + step + "'");
}

Result<json> ControlService::rm(const json& req) {
  PTC_RETURN_IF_ERROR(check_members(req, {"op", "path"}, "rm request"));
  PTC_ASSIGN_OR_RETURN(const std::string path, member_string(req, "path"));
  const size_t slash = path.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == path.size())
    return invalid("rm takes JOB/STEP, got '" + path + "'");
  const std::string job = path.substr(0, slash), step = path.substr(slash + 1);
  // A committed step is removed as such, even in the instant after its save committed and
  // before the save service forgot it (ls already says committed; the load test hit this).
  auto committed = current_version(store_, job, step);
  if (!committed && saves_.progress(job, step)) {
    PTC_RETURN_IF_ERROR(saves_.remove(job, step));
    return json{{"job", job}, {"step", step}, {"removed", "pending"}};
  }
  if (!committed && committed.status().code() == Code::kNotFound) {
    // A job made in the mount that has no step yet is a job too, as `ls` shows.
    const auto made = saves_.jobs();
    if (std::find(made.begin(), made.end(), job) != made.end())
      return not_found("job '" + job + "' has no step '" + step + "'");
  }
  PTC_RETURN_IF_ERROR(committed.status());
  PTC_RETURN_IF_ERROR(runner_.remove(RemoveRequest{job, step}));
  return json{{"job", job}, {"step", step}, {"removed", "committed"}};
}

// The template of an import request: a shipped one by name, or a template file's text.
static Result<formats::PtcTemplate> template_of(const json& req) {
  PTC_ASSIGN_OR_RETURN(std::string text, member_string_or(req, "template_text", ""));
  PTC_ASSIGN_OR_RETURN(std::string name, member_string_or(req, "template", ""));
  if (!text.empty()) return formats::parse_template_json(text, name.empty() ? "template" : "template file " + name);
  if (name.empty()) return invalid("--format hf needs --template NAME (one of the shipped ones, or a file)");
  return formats::builtin_template(name);
}

// An import request: a ptc.json checkpoint directory, with format hf a Hugging Face one, with
// format dcp a stock DCP folder.
static Result<ImportRequest> parse_import(const json& req, std::string& format) {
  PTC_RETURN_IF_ERROR(check_members(
      req, {"op", "dir", "job", "step", "nodes", "format", "template", "template_text", "to"}, "import request"));
  PTC_ASSIGN_OR_RETURN(format, member_string_or(req, "format", "ptc"));
  if (format != "ptc" && format != "hf" && format != "dcp")
    return invalid("unknown import format '" + format + "' (ptc, hf or dcp)");
  if (format != "ptc" && req.contains("nodes")) return invalid("--nodes does not go with --format " + format);
  if (format != "hf")
    for (const char* k : {"template", "template_text"})
      if (req.contains(k)) return invalid(std::string("'") + k + "' needs --format hf");
  ImportRequest r;
  PTC_ASSIGN_OR_RETURN(r.dir, member_string(req, "dir"));
  PTC_ASSIGN_OR_RETURN(r.job, member_string(req, "job"));
  PTC_ASSIGN_OR_RETURN(r.step, member_string(req, "step"));
  if (req.contains("nodes")) {
    PTC_ASSIGN_OR_RETURN(r.nodes, member_strings(req, "nodes"));
  }
  if (r.dir.empty() || (r.dir[0] != '/' && r.dir.rfind("s3://", 0) != 0))
    return invalid("import directory must be an absolute path or s3://bucket/prefix, got '" + r.dir + "'");
  if (format == "hf") {
    PTC_ASSIGN_OR_RETURN(r.hf, template_of(req));
  }
  PTC_ASSIGN_OR_RETURN(std::string to, member_string_or(req, "to", ""));
  if (!to.empty()) {
    PTC_ASSIGN_OR_RETURN(r.then, ptc::parse_parallelism(to));
  }
  return r;
}

Result<ImportResult> ControlService::import_dcp(const ImportRequest& r, const PhaseProgress& progress) {
  PTC_ASSIGN_OR_RETURN(auto src, sources_.open(r.dir));
  PTC_ASSIGN_OR_RETURN(const DcpImportSummary sum,
                       import_dcp_folder(
                           saves_, *src, r.job, r.step,
                           [this](const std::string& j, const std::string& s) { return saves_.remove(j, s); },
                           [&](uint64_t done, uint64_t total) {
                             if (progress) progress("copy", done, total);
                           }));
  PTC_ASSIGN_OR_RETURN(auto v, current_version(store_, r.job, r.step));
  ImportResult out;
  out.job = r.job;
  out.step = r.step;
  out.format = "dcp";
  out.shards = v->layout().shards().size();
  out.tensors = v->layout().ptc().tensors.size();
  out.bytes = sum.bytes;
  out.seconds = sum.seconds;
  if (r.then) {
    // Straight into the asked layout, as the other formats' --to (on a cluster: the minimum moves).
    auto rep = runner_.repartition(RepartitionRequest{r.job, r.step, *r.then, false, {}, 0}, progress);
    if (!rep)
      return rep.status().with_context("imported " + r.job + "/" + r.step + " from " + r.dir + ", but " +
                                       "the repartition to " + r.then->to_string() + " failed");
    out.repartition = std::move(rep).value();
    out.shards = static_cast<size_t>(r.then->tp * r.then->pp);
  }
  return out;
}

Result<json> ControlService::import(const json& req, const transport::ProgressSink& progress) {
  std::string format;
  PTC_ASSIGN_OR_RETURN(ImportRequest r, parse_import(req, format));
  ThrottledProgress report(progress);
  auto res = format == "dcp" ? import_dcp(r, report.fn()) : runner_.import(r, report.fn());
  if (!res) {
    log::warn("import of {} as {}/{} refused: {}", r.dir, r.job, r.step, res.status().to_string());
    return res.status();
  }
  return to_json(*res);
}

Result<json> ControlService::repartition(const json& req, const transport::ProgressSink& progress) {
  PTC_RETURN_IF_ERROR(check_members(req, {"op", "job", "step", "to", "chunks", "dry_run", "nodes", "global_batch"},
                                    "repartition request"));
  RepartitionRequest r;
  if (req.contains("nodes")) {
    PTC_ASSIGN_OR_RETURN(r.nodes, member_strings(req, "nodes"));
  }
  PTC_ASSIGN_OR_RETURN(r.job, member_string(req, "job"));
  PTC_ASSIGN_OR_RETURN(r.step, member_string(req, "step"));
  if (req.contains("to") == req.contains("chunks")) return invalid("repartition request: give either to or chunks");
  json match;
  if (req.contains("chunks")) {  // the tp whose slices are the chunks a job will load
    PTC_ASSIGN_OR_RETURN(auto current, current_version(store_, r.job, r.step));
    const auto& layout = current->layout();
    PTC_ASSIGN_OR_RETURN(ChunkRequest chunks, parse_chunk_request(req["chunks"], layout.ptc()));
    r.to = parallelism_for(chunks, layout.ptc(), layout.parallelism());
    match = chunk_match(chunks, layout.ptc(), r.to.tp);
  } else {
    PTC_ASSIGN_OR_RETURN(std::string to, member_string(req, "to"));
    PTC_ASSIGN_OR_RETURN(r.to, ptc::parse_parallelism(to));
  }
  PTC_ASSIGN_OR_RETURN(r.dry_run, member_bool_or(req, "dry_run", false));
  PTC_ASSIGN_OR_RETURN(r.global_batch, member_u64_or(req, "global_batch", 0, "repartition request"));
  if (req.contains("global_batch") && r.global_batch == 0)
    return invalid("repartition request: global_batch must be at least 1");
  ThrottledProgress report(progress);
  auto res = runner_.repartition(r, report.fn());
  if (!res) {
    log::warn("repartition of {}/{} to {} refused: {}", r.job, r.step, r.to.to_string(), res.status().to_string());
    return res.status();
  }
  json out = to_json(*res);
  if (!match.is_null()) out["chunks"] = std::move(match);
  return out;
}

}  // namespace ptcfs
