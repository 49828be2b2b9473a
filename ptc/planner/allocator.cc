#include "ptc/planner/allocator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "ptc/base/json_util.h"
#include "ptc/planner/planner.h"

namespace ptc {

using nlohmann::json;

namespace {

// The table of the dynamic program holds (jobs + 1) x (gpus + 1) entries.
constexpr int kMaxGpus = 1 << 16;
constexpr size_t kMaxJobs = 10000;

Result<int> parse_gpu_count(const std::string& key, const std::string& where) {
  if (key.empty() || key.size() > 7 || key.find_first_not_of("0123456789") != std::string::npos || key[0] == '0')
    return invalid(where + ": '" + key + "' is not a GPU count (a positive integer)");
  const int n = std::stoi(key);
  if (n > kMaxGpus) return invalid(where + ": " + key + " GPUs is more than " + std::to_string(kMaxGpus));
  return n;
}

Result<JobSpec> parse_job(const json& j, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_members(j, {"name", "min_gpus", "max_gpus", "throughput", "model", "samples"}, where));
  JobSpec job;
  PTC_ASSIGN_OR_RETURN(job.name, member_string(j, "name", where));
  if (job.name.empty()) return invalid(where + ": name is empty");
  const std::string at = where + " ('" + job.name + "')";
  for (const char* key : {"min_gpus", "max_gpus"})
    if (!j.contains(key)) return invalid(at + " lacks '" + key + "'");
  PTC_ASSIGN_OR_RETURN(int64_t lo, get_int(j["min_gpus"], at + ": min_gpus", 1, kMaxGpus));
  PTC_ASSIGN_OR_RETURN(int64_t hi, get_int(j["max_gpus"], at + ": max_gpus", 1, kMaxGpus));
  if (lo > hi)
    return invalid(at + ": min_gpus (" + std::to_string(lo) + ") is more than max_gpus (" + std::to_string(hi) + ")");
  job.min_gpus = static_cast<int>(lo);
  job.max_gpus = static_cast<int>(hi);
  if (j.contains("samples")) {
    const json& n = j["samples"];
    if (!n.is_number() || !std::isfinite(n.get<double>()) || n.get<double>() <= 0)
      return invalid(at + ": samples must be a number of samples > 0, got " + n.dump());
    job.samples = n.get<double>();
  }
  if (j.contains("throughput") == j.contains("model"))
    return invalid(at + ": give exactly one of 'throughput' (measured points) and 'model' (MODEL.json)");
  if (j.contains("model")) {
    PTC_ASSIGN_OR_RETURN(job.model, parse_model_spec(j["model"], at + ": model"));
    return job;
  }
  const json& t = j["throughput"];
  if (!t.is_object() || t.empty())
    return invalid(at + ": throughput must be a non-empty object of GPU count -> samples/s");
  std::set<int> seen;
  for (const auto& [key, value] : t.items()) {
    PTC_ASSIGN_OR_RETURN(int gpus, parse_gpu_count(key, at + ": throughput"));
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0)
      return invalid(at + ": throughput[\"" + key + "\"] must be a number of samples/s >= 0, got " + value.dump());
    if (!seen.insert(gpus).second) return invalid(at + ": throughput gives " + key + " GPUs twice");
    job.points.emplace_back(gpus, value.get<double>());
  }
  std::sort(job.points.begin(), job.points.end());
  return job;
}

}  // namespace

Result<std::vector<JobSpec>> parse_jobs_json(std::string_view text, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(json doc, parse_json(text, where));
  PTC_RETURN_IF_ERROR(check_members(doc, {"jobs"}, where));
  if (!doc.contains("jobs") || !doc["jobs"].is_array() || doc["jobs"].empty())
    return invalid(where + ": 'jobs' must be a non-empty list");
  if (doc["jobs"].size() > kMaxJobs) return invalid(where + ": more than " + std::to_string(kMaxJobs) + " jobs");
  std::vector<JobSpec> jobs;
  std::set<std::string> names;
  for (size_t i = 0; i < doc["jobs"].size(); ++i) {
    PTC_ASSIGN_OR_RETURN(JobSpec job, parse_job(doc["jobs"][i], where + ": jobs[" + std::to_string(i) + "]"));
    if (!names.insert(job.name).second) return invalid(where + ": job name '" + job.name + "' appears twice");
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::vector<JobOption>> job_options(const JobSpec& job, int gpus) {
  const std::string at = "job '" + job.name + "'";
  const int hi = std::min(job.max_gpus, gpus);
  std::vector<JobOption> out;
  if (!job.model) {
    for (const auto& [g, rate] : job.points)
      if (g >= job.min_gpus && g <= hi) out.push_back({g, rate, std::nullopt});
    if (out.empty())
      return invalid(at + " has no throughput point between min_gpus " + std::to_string(job.min_gpus) +
                     " and max_gpus " + std::to_string(job.max_gpus) +
                     (hi < job.max_gpus ? " (at most " + std::to_string(gpus) + " GPUs exist)" : std::string()));
    return out;
  }
  Status last;
  for (int g = job.min_gpus; g <= hi; ++g) {
    auto plan = plan_parallelism(*job.model, g);
    if (!plan) {
      last = plan.status();
      continue;
    }
    const Candidate& best = plan->front();
    out.push_back({g, static_cast<double>(job.model->global_batch) / best.step_seconds(), best.config});
  }
  if (out.empty())
    return invalid(at + ": its model runs on no GPU count between " + std::to_string(job.min_gpus) + " and " +
                   std::to_string(hi) +
                   (last.is_ok() ? std::string() : " (at " + std::to_string(hi) + ": " + last.message() + ")"));
  return out;
}

std::optional<std::vector<size_t>> max_total_throughput(const std::vector<std::vector<JobOption>>& options, int gpus) {
  const size_t jobs = options.size(), width = static_cast<size_t>(gpus) + 1;
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  // best[g]: the largest total of the jobs so far on at most g GPUs (row j of the table);
  // choice[j * width + g]: the option of job j that reached it.
  std::vector<double> best(width, 0.0), next(width);
  std::vector<size_t> choice(jobs * width, 0);
  for (size_t j = 0; j < jobs; ++j) {
    for (size_t g = 0; g < width; ++g) {
      next[g] = kNone;
      for (size_t o = 0; o < options[j].size(); ++o) {
        const size_t k = static_cast<size_t>(options[j][o].gpus);
        if (k > g || best[g - k] == kNone) continue;
        const double total = best[g - k] + options[j][o].samples_per_s;
        if (total > next[g]) {
          next[g] = total;
          choice[j * width + g] = o;
        }
      }
    }
    best.swap(next);
  }
  if (best[width - 1] == kNone) return std::nullopt;
  std::vector<size_t> picked(jobs);
  size_t g = width - 1;
  for (size_t j = jobs; j-- > 0;) {
    picked[j] = choice[j * width + g];
    g -= static_cast<size_t>(options[j][picked[j]].gpus);
  }
  return picked;
}

Result<Allocation> allocate_throughput(const std::vector<JobSpec>& jobs, int gpus) {
  if (gpus < 1) return invalid("gpus must be at least 1, got " + std::to_string(gpus));
  if (gpus > kMaxGpus)
    return invalid("gpus must be at most " + std::to_string(kMaxGpus) + ", got " + std::to_string(gpus));
  std::vector<std::vector<JobOption>> options;
  for (const JobSpec& job : jobs) {
    if (job.min_gpus > gpus)
      return invalid("job '" + job.name + "' asks for at least " + std::to_string(job.min_gpus) +
                     " GPUs, more than the " + std::to_string(gpus) + " there are");
    PTC_ASSIGN_OR_RETURN(auto o, job_options(job, gpus));
    options.push_back(std::move(o));
  }
  // First come, first served: admit while the smallest counts fit together.
  size_t admitted = 0;
  int smallest = 0;
  while (admitted < jobs.size() && smallest + options[admitted].front().gpus <= gpus)
    smallest += options[admitted++].front().gpus;
  options.resize(admitted);
  auto picked = max_total_throughput(options, gpus);
  if (!picked) return internal("the admitted jobs' smallest counts fit, yet the dynamic program found no allocation");
  Allocation out;
  for (size_t j = 0; j < jobs.size(); ++j) {
    JobAllocation a{jobs[j].name, j >= admitted, {}};
    if (!a.queued) {
      a.option = options[j][(*picked)[j]];
      out.gpus_used += a.option.gpus;
      out.samples_per_s += a.option.samples_per_s;
    }
    out.jobs.push_back(std::move(a));
  }
  return out;
}

}  // namespace ptc
