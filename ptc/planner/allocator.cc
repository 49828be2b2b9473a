#include "ptc/planner/allocator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "ptc/base/json_util.h"
#include "ptc/planner/planner.h"

namespace ptcfs::planner {

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

constexpr int64_t kMaxBatch = int64_t{1} << 30;

Result<int64_t> parse_batch_key(const std::string& key, const std::string& where) {
  if (key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos || key[0] == '0')
    return invalid(where + ": '" + key + "' is not a global batch (a positive integer)");
  const int64_t b = std::stoll(key);
  if (b > kMaxBatch)
    return invalid(where + ": a global batch of " + key + " is more than " + std::to_string(kMaxBatch));
  return b;
}

// "batch": {"min": B0, "max": B1} or [B, ...].
Result<BatchChoice> parse_batch(const json& b, const std::string& at) {
  BatchChoice out;
  if (b.is_array()) {
    if (b.empty()) return invalid(at + ": batch must be a non-empty list of global batches or {\"min\", \"max\"}");
    for (size_t i = 0; i < b.size(); ++i) {
      PTC_ASSIGN_OR_RETURN(int64_t v, get_int(b[i], at + ": batch[" + std::to_string(i) + "]", 1, kMaxBatch));
      out.listed.push_back(v);
    }
    std::sort(out.listed.begin(), out.listed.end());
    if (auto rep = std::adjacent_find(out.listed.begin(), out.listed.end()); rep != out.listed.end())
      return invalid(at + ": batch lists " + std::to_string(*rep) + " twice");
    out.min = out.listed.front();
    out.max = out.listed.back();
    return out;
  }
  if (!b.is_object())
    return invalid(at + ": batch must be a non-empty list of global batches or {\"min\", \"max\"}, got " + b.dump());
  PTC_RETURN_IF_ERROR(check_members(b, {"min", "max"}, at + ": batch"));
  for (const char* key : {"min", "max"})
    if (!b.contains(key)) return invalid(at + ": batch lacks '" + key + "'");
  PTC_ASSIGN_OR_RETURN(out.min, get_int(b["min"], at + ": batch.min", 1, kMaxBatch));
  PTC_ASSIGN_OR_RETURN(out.max, get_int(b["max"], at + ": batch.max", 1, kMaxBatch));
  if (out.min > out.max)
    return invalid(at + ": batch.min (" + std::to_string(out.min) + ") is more than batch.max (" +
                   std::to_string(out.max) + ")");
  return out;
}

// A million times any cluster's rate: the totals of 65,536 jobs stay finite (they overflowed to
// infinity, printed as null).
constexpr double kMaxRate = 1e15;

Result<double> parse_rate(const json& value, const std::string& what) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0 ||
      value.get<double>() > kMaxRate)
    return invalid(what + " must be a number of samples/s from 0 to 1e15, got " + value.dump());
  return value.get<double>();
}

// "throughput": GPU count -> samples/s, or, with "batch", GPU count -> global batch -> samples/s.
Status parse_points(const json& t, bool per_batch, const std::string& at, JobSpec& job) {
  if (!t.is_object() || t.empty())
    return invalid(at + ": throughput must be a non-empty object of GPU count -> " +
                   (per_batch ? "global batch -> samples/s" : "samples/s"));
  std::set<int> seen;
  for (const auto& [key, value] : t.items()) {
    PTC_ASSIGN_OR_RETURN(int gpus, parse_gpu_count(key, at + ": throughput"));
    if (!seen.insert(gpus).second) return invalid(at + ": throughput gives " + key + " GPUs twice");
    const std::string what = at + ": throughput[\"" + key + "\"]";
    if (!per_batch) {
      if (value.is_object())
        return invalid(what + " gives samples/s per global batch, but the job gives no 'batch' range");
      PTC_ASSIGN_OR_RETURN(double rate, parse_rate(value, what));
      job.points.push_back({gpus, rate, 0});
      continue;
    }
    if (!value.is_object() || value.empty())
      return invalid(what + " must be a non-empty object of global batch -> samples/s (the job gives 'batch'), got " +
                     value.dump());
    for (const auto& [bkey, rate_json] : value.items()) {
      PTC_ASSIGN_OR_RETURN(int64_t batch, parse_batch_key(bkey, what));
      PTC_ASSIGN_OR_RETURN(double rate, parse_rate(rate_json, what + "[\"" + bkey + "\"]"));
      job.points.push_back({gpus, rate, batch});
    }
  }
  std::sort(job.points.begin(), job.points.end(), [](const ThroughputPoint& a, const ThroughputPoint& b) {
    return std::pair(a.gpus, a.batch) < std::pair(b.gpus, b.batch);
  });
  return Status();
}

// "current": {"gpus": G, "global_batch": B}, B optional.
Result<Running> parse_current(const json& c, const std::string& at) {
  if (!c.is_object()) return invalid(at + ": current must be {\"gpus\": G, \"global_batch\": B}, got " + c.dump());
  PTC_RETURN_IF_ERROR(check_members(c, {"gpus", "global_batch"}, at + ": current"));
  if (!c.contains("gpus")) return invalid(at + ": current lacks 'gpus'");
  Running r;
  PTC_ASSIGN_OR_RETURN(int64_t g, get_int(c["gpus"], at + ": current.gpus", 1, kMaxGpus));
  r.gpus = static_cast<int>(g);
  if (c.contains("global_batch")) {
    PTC_ASSIGN_OR_RETURN(r.global_batch, get_int(c["global_batch"], at + ": current.global_batch", 1, kMaxBatch));
  }
  return r;
}

Result<JobSpec> parse_job(const json& j, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_members(
      j, {"name", "min_gpus", "max_gpus", "batch", "throughput", "model", "samples", "current", "move_seconds"},
      where));
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
  if (j.contains("batch")) {
    PTC_ASSIGN_OR_RETURN(job.batch, parse_batch(j["batch"], at));
  }
  if (j.contains("current")) {
    PTC_ASSIGN_OR_RETURN(job.current, parse_current(j["current"], at));
  }
  if (j.contains("move_seconds")) {
    const json& n = j["move_seconds"];
    if (!n.is_number() || !std::isfinite(n.get<double>()) || n.get<double>() < 0)
      return invalid(at + ": move_seconds must be a number of seconds >= 0, got " + n.dump());
    job.move_seconds = n.get<double>();
  }
  if (j.contains("throughput") == j.contains("model"))
    return invalid(at + ": give exactly one of 'throughput' (measured points) and 'model' (MODEL.json)");
  if (j.contains("model")) {
    PTC_ASSIGN_OR_RETURN(job.model, parse_model_spec(j["model"], at + ": model"));
    return job;
  }
  PTC_RETURN_IF_ERROR(parse_points(j["throughput"], job.batch.has_value(), at, job));
  return job;
}

// The planner's best configuration of `model` on each count of [lo, hi] that has one.
void plan_options(const ModelSpec& model, int lo, int hi, std::vector<JobOption>& out, Status& last) {
  for (int g = lo; g <= hi; ++g) {
    auto plan = plan_parallelism(model, g);
    if (!plan) {
      last = plan.status();
      continue;
    }
    const Candidate& best = plan->front();
    out.push_back({g, static_cast<double>(model.global_batch) / best.step_seconds(), best.config, model.global_batch});
  }
}

std::string batch_text(const BatchChoice& b) {
  if (b.listed.empty()) return "global batches " + std::to_string(b.min) + ".." + std::to_string(b.max);
  std::string out = "global batches ";
  for (size_t i = 0; i < b.listed.size(); ++i) out += (i ? "," : "") + std::to_string(b.listed[i]);
  return out;
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

bool BatchChoice::accepts(int64_t batch) const {
  if (listed.empty()) return batch >= min && batch <= max;
  return std::binary_search(listed.begin(), listed.end(), batch);
}

std::vector<int64_t> batches_to_plan(const BatchChoice& batch) {
  if (!batch.listed.empty()) return batch.listed;
  std::vector<int64_t> out;
  for (int64_t b = batch.min; b < batch.max; b *= 2) out.push_back(b);
  out.push_back(batch.max);
  return out;
}

Result<std::vector<JobOption>> job_options(const JobSpec& job, int gpus) {
  const std::string at = "job '" + job.name + "'";
  const int hi = std::min(job.max_gpus, gpus);
  std::vector<JobOption> out;
  if (!job.model) {
    for (const auto& p : job.points)
      if (p.gpus >= job.min_gpus && p.gpus <= hi && (!job.batch || job.batch->accepts(p.batch)))
        out.push_back({p.gpus, p.samples_per_s, std::nullopt, p.batch});
    if (out.empty())
      return invalid(at + " has no throughput point between min_gpus " + std::to_string(job.min_gpus) +
                     " and max_gpus " + std::to_string(job.max_gpus) +
                     (hi < job.max_gpus ? " (at most " + std::to_string(gpus) + " GPUs exist)" : std::string()) +
                     (job.batch ? " at " + batch_text(*job.batch) : std::string()));
    return out;
  }
  Status last;
  if (!job.batch) {
    plan_options(*job.model, job.min_gpus, hi, out, last);
  } else {
    ModelSpec model = *job.model;
    for (int64_t b : batches_to_plan(*job.batch)) {
      model.global_batch = b;
      plan_options(model, job.min_gpus, hi, out, last);
    }
    std::stable_sort(out.begin(), out.end(), [](const JobOption& a, const JobOption& b) {
      return std::pair(a.gpus, a.global_batch) < std::pair(b.gpus, b.global_batch);
    });
  }
  if (out.empty())
    return invalid(at + ": its model runs on no GPU count between " + std::to_string(job.min_gpus) + " and " +
                   std::to_string(hi) + (job.batch ? " at " + batch_text(*job.batch) : std::string()) +
                   (last.is_ok() ? std::string() : " (at " + std::to_string(hi) + ": " + last.message() + ")"));
  return out;
}

constexpr double kLeastWeight = 1e-9;

void weigh_moves(const JobSpec& job, double horizon_s, std::vector<JobOption>& options) {
  if (!job.current || job.move_seconds <= 0 || horizon_s <= 0) return;
  // Floored above 0: a move the horizon cannot pay back still ranks by its rate, for when the
  // current option is gone (fewer GPUs) and the job must move anyway.
  const double moved = std::max(kLeastWeight, 1.0 - job.move_seconds / horizon_s);
  for (JobOption& o : options) {
    const bool current = o.gpus == job.current->gpus && (job.current->global_batch == 0 || o.global_batch == 0 ||
                                                         o.global_batch == job.current->global_batch);
    o.weight = current ? 1.0 : moved;
  }
}

std::optional<std::vector<size_t>> max_total_throughput(const std::vector<std::vector<JobOption>>& options, int gpus) {
  const size_t jobs = options.size(), width = static_cast<size_t>(gpus) + 1;
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  // best[g]: the largest total of the jobs so far on at most g GPUs (row j of the table);
  // choice[j * width + g]: the option of job j that reached it.
  std::vector<double> best(width, 0.0), next(width);
  std::vector<uint32_t> choice(jobs * width, 0);  // option indexes (check_table bounds the size)
  // The options that can be picked: each worth more (samples_per_s x weight) than every option
  // on as many GPUs or fewer. The table is non-decreasing in g, so an option on more GPUs that
  // is worth no more never adds more, and the first listed of equals wins ties (the strict >
  // below): dropping the others changes no pick (several batches on one count: only the one
  // worth most is looked at).
  std::vector<size_t> useful;
  for (size_t j = 0; j < jobs; ++j) {
    useful.resize(options[j].size());
    std::iota(useful.begin(), useful.end(), size_t{0});
    std::stable_sort(useful.begin(), useful.end(),
                     [&](size_t a, size_t b) { return options[j][a].gpus < options[j][b].gpus; });
    double fastest = kNone;
    size_t kept = 0;
    const auto value = [&](size_t o) { return options[j][o].samples_per_s * options[j][o].weight; };
    for (size_t o : useful)
      if (value(o) > fastest) {
        fastest = value(o);
        useful[kept++] = o;
      }
    useful.resize(kept);
    // Option by option, each over every g: the same comparisons in the same order for each g as
    // g by g (the first option reaching the largest total is the choice), in a loop over
    // contiguous memory. An unreachable best[g - k] (kNone) stays kNone plus the rate, never larger.
    std::fill(next.begin(), next.end(), kNone);
    uint32_t* ch = choice.data() + j * width;
    for (size_t o : useful) {
      const size_t k = static_cast<size_t>(options[j][o].gpus);
      const double rate = value(o);
      for (size_t g = k; g < width; ++g) {
        const double total = best[g - k] + rate;
        if (total > next[g]) {
          next[g] = total;
          ch[g] = static_cast<uint32_t>(o);
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

namespace {

Status check_capacity(int gpus) {
  if (gpus < 1) return invalid("gpus must be at least 1, got " + std::to_string(gpus));
  if (gpus > kMaxGpus)
    return invalid("gpus must be at most " + std::to_string(kMaxGpus) + ", got " + std::to_string(gpus));
  return Status::ok();
}

}  // namespace

Result<Allocation> allocate_throughput(const std::vector<JobSpec>& jobs, int gpus, double horizon_s) {
  PTC_RETURN_IF_ERROR(check_capacity(gpus));
  std::vector<std::vector<JobOption>> options;
  std::vector<std::string> names;
  for (const JobSpec& job : jobs) {
    if (job.min_gpus > gpus)
      return invalid("job '" + job.name + "' asks for at least " + std::to_string(job.min_gpus) +
                     " GPUs, more than the " + std::to_string(gpus) + " there are");
    PTC_ASSIGN_OR_RETURN(auto o, job_options(job, gpus));
    weigh_moves(job, horizon_s, o);
    options.push_back(std::move(o));
    names.push_back(job.name);
  }
  return allocate_options(names, std::move(options), gpus);
}

Result<Allocation> allocate_options(const std::vector<std::string>& names, std::vector<std::vector<JobOption>> options,
                                    int gpus) {
  PTC_RETURN_IF_ERROR(check_capacity(gpus));
  if (names.size() != options.size())
    return invalid(std::to_string(names.size()) + " job names for the options of " + std::to_string(options.size()));
  for (size_t j = 0; j < options.size(); ++j)
    if (options[j].empty()) return invalid("job '" + names[j] + "' has no option");
  // First come, first served: admit while the smallest counts fit together.
  size_t admitted = 0;
  int smallest = 0;
  while (admitted < options.size() && smallest + options[admitted].front().gpus <= gpus)
    smallest += options[admitted++].front().gpus;
  options.resize(admitted);
  const size_t cells = admitted * (static_cast<size_t>(gpus) + 1);
  if (cells > kMaxTableCells)
    return invalid(std::to_string(admitted) + " jobs on " + std::to_string(gpus) + " GPUs need a table of " +
                   std::to_string(cells) + " choices (" + std::to_string(cells * sizeof(uint32_t) >> 20) +
                   " MiB), more than " + std::to_string(kMaxTableCells) +
                   ": allocate fewer jobs at a time, or fewer GPUs");
  auto picked = max_total_throughput(options, gpus);
  if (!picked) return internal("the admitted jobs' smallest counts fit, yet the dynamic program found no allocation");
  Allocation out;
  for (size_t j = 0; j < names.size(); ++j) {
    JobAllocation a{names[j], j >= admitted, {}};
    if (!a.queued) {
      a.option = options[j][(*picked)[j]];
      out.gpus_used += a.option.gpus;
      out.samples_per_s += a.option.samples_per_s;
    }
    out.jobs.push_back(std::move(a));
  }
  return out;
}

}  // namespace ptcfs::planner
