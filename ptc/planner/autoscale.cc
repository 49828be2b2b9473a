#include "ptc/planner/autoscale.h"

#include <algorithm>
#include <limits>
#include <map>

#include "ptc/base/json_util.h"
#include "ptc/planner/planner.h"

namespace ptcfs::planner {

using nlohmann::json;

Result<QueueEntry> parse_queue_entry(std::string_view text, const std::string& name, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(json doc, parse_json(text, where));
  PTC_RETURN_IF_ERROR(
      check_members(doc, {"job", "daemon", "store_job", "layout", "samples_done", "samples_done_step"}, where));
  if (!doc.contains("job") || !doc["job"].is_object()) return invalid(where + ": 'job' must be a JOBS.json entry");
  json job = doc["job"];
  if (!job.contains("name")) job["name"] = name;
  if (!job["name"].is_string() || job["name"].get<std::string>() != name)
    return invalid(where + ": job.name must be the queue name '" + name + "'");
  if (job.contains("current"))
    return invalid(where + ": job.current is the controller's: a job runs on its stored decision");
  PTC_ASSIGN_OR_RETURN(auto specs, parse_jobs_json(json{{"jobs", json::array({job})}}.dump(), where));
  QueueEntry e;
  e.spec = std::move(specs.front());
  PTC_ASSIGN_OR_RETURN(e.daemon, member_string(doc, "daemon", where));
  if (e.daemon.empty()) return invalid(where + ": 'daemon' must name the job's ptcfsd (HOST:PORT)");
  PTC_ASSIGN_OR_RETURN(e.store_job, member_string_or(doc, "store_job", name, where));
  if (doc.contains("layout")) {
    if (e.spec.model) return invalid(where + ": 'layout' goes with measured throughput; the planner lays out a model");
    const json& l = doc["layout"];
    PTC_RETURN_IF_ERROR(check_members(l, {"tp", "pp"}, where + ": layout"));
    if (l.contains("tp")) {
      PTC_ASSIGN_OR_RETURN(e.tp, get_int(l["tp"], where + ": layout.tp", 1, 1 << 20));
    }
    if (l.contains("pp")) {
      PTC_ASSIGN_OR_RETURN(e.pp, get_int(l["pp"], where + ": layout.pp", 1, 1 << 20));
    }
    // A model-parallel group larger than any GPU count the allocator takes is no layout (and
    // tp x pp must not overflow where it divides the counts).
    if (int64_t{e.tp} * e.pp > e.spec.max_gpus)
      return invalid(where + ": layout.tp x layout.pp (" + std::to_string(int64_t{e.tp} * e.pp) +
                     ") is more than the job's max_gpus (" + std::to_string(e.spec.max_gpus) + ")");
  }
  if (doc.contains("samples_done")) {
    const json& n = doc["samples_done"];
    if (!e.spec.samples) return invalid(where + ": 'samples_done' goes with the job's 'samples'");
    if (!n.is_number() || n.get<double>() < 0 || n.get<double>() >= *e.spec.samples)
      return invalid(where + ": samples_done must be a number of samples >= 0 and below the job's samples (" +
                     json(*e.spec.samples).dump() + "; a job that trained them all leaves the queue), got " + n.dump());
    e.samples_done = n.get<double>();
  }
  if (doc.contains("samples_done_step")) {
    if (!doc.contains("samples_done")) return invalid(where + ": 'samples_done_step' goes with 'samples_done'");
    PTC_ASSIGN_OR_RETURN(e.samples_done_step, get_int(doc["samples_done_step"], where + ": samples_done_step", 0));
  }
  return e;
}

std::string stored_decision_json(const StoredDecision& s) {
  const Decision& d = s.decision;
  json j = {{"job", d.job},
            {"queued", d.queued},
            {"gpus", d.gpus},
            {"global_batch", d.global_batch ? json(d.global_batch) : json(nullptr)},
            {"tp", d.tp},
            {"pp", d.pp},
            {"dp", d.dp},
            {"micro_batch", d.micro_batch ? json(d.micro_batch) : json(nullptr)},
            {"step", s.step.empty() ? json(nullptr) : json(s.step)},
            {"seq", s.seq},
            {"controller", s.controller}};
  return j.dump();
}

namespace {

Result<int64_t> int_or_null(const json& doc, const char* key, const std::string& where,
                            int64_t max = std::numeric_limits<int64_t>::max()) {
  if (!doc.contains(key)) return invalid(where + " lacks '" + key + "'");
  if (doc[key].is_null()) return int64_t{0};
  return get_int(doc[key], where + ": " + key, 0, max);
}

}  // namespace

Result<StoredDecision> parse_stored_decision(std::string_view text, const std::string& job, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(json doc, parse_json(text, where));
  PTC_RETURN_IF_ERROR(check_members(
      doc, {"job", "queued", "gpus", "global_batch", "tp", "pp", "dp", "micro_batch", "step", "seq", "controller"},
      where));
  StoredDecision s;
  Decision& d = s.decision;
  d.job = job;
  PTC_ASSIGN_OR_RETURN(d.queued, member_bool_or(doc, "queued", false, where));
  // Every count within what a capacity may be (a capacity is at most kMaxDecisionGpus): a value read
  // from etcd is anyone's who can write under the prefix.
  int64_t v = 0;
  PTC_ASSIGN_OR_RETURN(v, int_or_null(doc, "gpus", where, kMaxDecisionGpus));
  d.gpus = static_cast<int>(v);
  PTC_ASSIGN_OR_RETURN(d.global_batch, int_or_null(doc, "global_batch", where, kMaxBatch));
  PTC_ASSIGN_OR_RETURN(v, int_or_null(doc, "tp", where, kMaxDecisionGpus));
  d.tp = static_cast<int>(v);
  PTC_ASSIGN_OR_RETURN(v, int_or_null(doc, "pp", where, kMaxDecisionGpus));
  d.pp = static_cast<int>(v);
  PTC_ASSIGN_OR_RETURN(v, int_or_null(doc, "dp", where, kMaxDecisionGpus));
  d.dp = static_cast<int>(v);
  PTC_ASSIGN_OR_RETURN(d.micro_batch, int_or_null(doc, "micro_batch", where, kMaxBatch));
  // A decision is what the controller writes: queued with nothing, or running on gpus = tp pp dp.
  if (d.queued ? (d.gpus || d.tp || d.pp || d.dp)
               : (d.gpus < 1 || d.tp < 1 || d.pp < 1 || d.dp < 1 || int64_t{d.tp} * d.pp * d.dp != d.gpus))
    return invalid(where + ": " +
                   (d.queued ? "a queued decision holds no GPUs and no layout"
                             : "a running decision has gpus = tp x pp x dp, each at least 1") +
                   " (gpus " + std::to_string(d.gpus) + ", tp " + std::to_string(d.tp) + ", pp " +
                   std::to_string(d.pp) + ", dp " + std::to_string(d.dp) + ")");
  PTC_ASSIGN_OR_RETURN(s.seq, int_or_null(doc, "seq", where));
  if (doc.contains("step") && !doc["step"].is_null()) {
    PTC_ASSIGN_OR_RETURN(s.step, get_string(doc["step"], where));
  }
  PTC_ASSIGN_OR_RETURN(s.controller, member_string_or(doc, "controller", "", where));
  return s;
}

std::vector<std::pair<size_t, std::string>> duplicate_store_jobs(const std::vector<QueueEntry>& queue) {
  std::map<std::pair<std::string, std::string>, size_t> first;
  std::vector<std::pair<size_t, std::string>> out;
  for (size_t i = 0; i < queue.size(); ++i) {
    const auto [it, fresh] = first.emplace(std::make_pair(queue[i].daemon, queue[i].store_job), i);
    if (!fresh)
      out.emplace_back(i, "it names store job '" + queue[i].store_job + "' at " + queue[i].daemon +
                              ", as the earlier queue entry of job '" + queue[it->second].spec.name +
                              "' does (one step cannot follow two jobs' decisions)");
  }
  return out;
}

std::vector<JobSpec> autoscale_specs(const std::vector<QueueEntry>& queue) {
  std::vector<JobSpec> out;
  for (const QueueEntry& e : queue) {
    JobSpec s = e.spec;
    if (s.model) s.model = as_stored(*s.model);
    if (s.samples) *s.samples -= e.samples_done;
    const int mp = e.tp * e.pp;
    std::erase_if(s.points, [&](const ThroughputPoint& p) {
      return p.gpus % mp != 0 || (p.batch > 0 && p.batch % (p.gpus / mp) != 0);
    });
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Decision> decisions_from(const std::vector<QueueEntry>& queue,
                                     const std::vector<JobAllocation>& allocated) {
  std::vector<Decision> out;
  for (size_t j = 0; j < queue.size(); ++j) {
    const QueueEntry& e = queue[j];
    Decision d;
    d.job = e.spec.name;
    const JobAllocation* a = j < allocated.size() ? &allocated[j] : nullptr;
    if (!a || a->queued || a->option.gpus == 0) {
      d.queued = true;
      out.push_back(std::move(d));
      continue;
    }
    const JobOption& o = a->option;
    d.gpus = o.gpus;
    d.global_batch = o.global_batch;
    if (o.config) {
      d.tp = o.config->tp;
      d.pp = o.config->pp;
      d.dp = o.config->dp;
      d.micro_batch = o.config->micro_batch;
    } else {
      d.tp = e.tp;
      d.pp = e.pp;
      d.dp = o.gpus / (e.tp * e.pp);
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<std::vector<JobOption>> fitting_options(const std::vector<JobSpec>& specs, int gpus) {
  std::vector<std::vector<JobOption>> out;
  for (const JobSpec& s : specs) {
    if (gpus <= 0 || s.min_gpus > gpus) break;
    auto options = job_options(s, gpus);
    if (!options) break;
    out.push_back(std::move(*options));
  }
  return out;
}

std::vector<JobAllocation> starting_now(const Schedule& schedule) {
  std::vector<JobAllocation> out;
  for (const ScheduledJob& j : schedule.jobs) {
    const bool now = j.start_s <= 0;
    out.push_back({j.name, !now, now ? j.option.option : JobOption{}});
  }
  return out;
}

Result<std::vector<Decision>> decide_throughput(const std::vector<QueueEntry>& queue, int gpus,
                                                const std::map<std::string, Decision>& running, double horizon_s) {
  if (gpus < 0) return invalid("the GPU capacity must be at least 0, got " + std::to_string(gpus));
  std::vector<JobSpec> specs = autoscale_specs(queue);
  // First come, first served: the jobs before the first that has no option on `gpus` GPUs.
  std::vector<std::vector<JobOption>> options = fitting_options(specs, gpus);
  std::vector<std::string> names;
  for (size_t j = 0; j < options.size(); ++j) {
    names.push_back(specs[j].name);
    const auto it = running.find(specs[j].name);
    if (it == running.end() || it->second.queued || it->second.gpus == 0) continue;
    specs[j].current = Running{it->second.gpus, it->second.global_batch};
    weigh_moves(specs[j], horizon_s, options[j]);
  }
  std::vector<JobAllocation> allocated;
  if (!options.empty()) {
    PTC_ASSIGN_OR_RETURN(Allocation a, allocate_options(names, std::move(options), gpus));
    allocated = std::move(a.jobs);
  }
  return decisions_from(queue, allocated);
}

Changes changes(const std::vector<Decision>& next, const std::map<std::string, Decision>& stored) {
  Changes c;
  std::vector<Decision> others;
  for (const Decision& d : next) {
    auto it = stored.find(d.job);
    if (it != stored.end() && it->second == d) continue;
    if (it != stored.end() && d.gpus < it->second.gpus)
      c.changed.push_back(d);
    else
      others.push_back(d);
  }
  c.shrinks = c.changed.size();
  c.changed.insert(c.changed.end(), others.begin(), others.end());
  for (const auto& entry : stored) {  // not a structured binding: clang 14 cannot capture one
    const std::string& job = entry.first;
    const bool queued = std::any_of(next.begin(), next.end(), [&](const Decision& n) { return n.job == job; });
    if (!queued) c.finished.push_back(job);
  }
  return c;
}

namespace {

bool decimal(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool step_before(const std::string& a, const std::string& b) {
  if (decimal(a) && decimal(b)) {
    const size_t za = a.find_first_not_of('0'), zb = b.find_first_not_of('0');
    const std::string na = za == std::string::npos ? "" : a.substr(za);
    const std::string nb = zb == std::string::npos ? "" : b.substr(zb);
    if (na.size() != nb.size()) return na.size() < nb.size();
    if (na != nb) return na < nb;
  }
  return a < b;
}

}  // namespace

std::optional<std::string> latest_step(const std::vector<std::string>& steps) {
  if (steps.empty()) return std::nullopt;
  return *std::max_element(steps.begin(), steps.end(), step_before);
}

}  // namespace ptcfs::planner
