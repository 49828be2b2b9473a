#include "ptc/planner/makespan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

namespace ptcfs::planner {

namespace {

struct Interval {
  double start, end;
  int gpus;
};

// GPUs in use at time `t` (intervals are [start, end)).
int used_at(const std::vector<Interval>& placed, double t) {
  int n = 0;
  for (const auto& i : placed)
    if (i.start <= t && t < i.end) n += i.gpus;
  return n;
}

// The earliest start at which `gpus` more GPUs are free for `seconds`: 0 or the end of a
// placed interval (usage only drops there), checked at the start and at every placed start
// inside the run.
double earliest_start(const std::vector<Interval>& placed, int gpus, double seconds, int capacity) {
  std::vector<double> candidates{0.0};
  for (const auto& i : placed) candidates.push_back(i.end);
  std::sort(candidates.begin(), candidates.end());
  for (double t : candidates) {
    bool fits = used_at(placed, t) + gpus <= capacity;
    for (size_t k = 0; fits && k < placed.size(); ++k)
      if (placed[k].start > t && placed[k].start < t + seconds)
        fits = used_at(placed, placed[k].start) + gpus <= capacity;
    if (fits) return t;
  }
  return candidates.back();  // every placed job has ended by then (unreachable while gpus <= capacity)
}

// Gives every job of `s` GPU ids: at each start, the jobs ended by then hand theirs back and
// the job takes the lowest free ones.
void assign_gpu_ids(Schedule& s, int gpus) {
  std::vector<size_t> by_start(s.jobs.size());
  std::iota(by_start.begin(), by_start.end(), 0);
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](size_t a, size_t b) { return s.jobs[a].start_s < s.jobs[b].start_s; });
  std::set<int> free;
  for (int g = 0; g < gpus; ++g) free.insert(g);
  std::vector<size_t> running;
  for (size_t j : by_start) {
    ScheduledJob& job = s.jobs[j];
    std::erase_if(running, [&](size_t r) {
      if (s.jobs[r].end_s > job.start_s) return false;
      free.insert(s.jobs[r].gpu_ids.begin(), s.jobs[r].gpu_ids.end());
      return true;
    });
    for (int k = 0; k < job.option.option.gpus && !free.empty(); ++k) {
      job.gpu_ids.push_back(*free.begin());
      free.erase(free.begin());
    }
    running.push_back(j);
  }
}

// The same options with run times in whole slots.
std::vector<std::vector<TimedOption>> in_slots(const std::vector<std::vector<TimedOption>>& options, double slot_s) {
  auto out = options;
  for (auto& job : out)
    for (auto& o : job) o.seconds = std::max(1.0, std::ceil(o.seconds / slot_s - 1e-9));
  return out;
}

std::string lacks_samples(const JobSpec& job) {
  return "job '" + job.name +
         "' lacks 'samples' (how many samples it trains), which the makespan policy needs to know how long it runs";
}

}  // namespace

Result<std::vector<std::vector<TimedOption>>> timed_options(const std::vector<JobSpec>& jobs, int gpus) {
  if (gpus < 1) return invalid("gpus must be at least 1, got " + std::to_string(gpus));
  std::vector<std::vector<JobOption>> options;
  for (const JobSpec& job : jobs) {
    if (!job.samples) return invalid(lacks_samples(job));
    if (job.min_gpus > gpus)
      return invalid("job '" + job.name + "' asks for at least " + std::to_string(job.min_gpus) +
                     " GPUs, more than the " + std::to_string(gpus) + " there are");
    PTC_ASSIGN_OR_RETURN(auto o, job_options(job, gpus));
    options.push_back(std::move(o));
  }
  return timed_options(jobs, options);
}

Result<std::vector<std::vector<TimedOption>>> timed_options(const std::vector<JobSpec>& jobs,
                                                            const std::vector<std::vector<JobOption>>& options) {
  if (jobs.size() != options.size())
    return invalid(std::to_string(jobs.size()) + " jobs for the options of " + std::to_string(options.size()));
  std::vector<std::vector<TimedOption>> out;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const JobSpec& job = jobs[j];
    if (!job.samples) return invalid(lacks_samples(job));
    std::vector<TimedOption> timed;
    for (const auto& o : options[j])
      if (o.samples_per_s > 0) timed.push_back({o, *job.samples / o.samples_per_s});
    // Drop what another option beats: no more GPUs and no longer (options are by GPUs ascending).
    std::vector<TimedOption> kept;
    for (const auto& o : timed)
      if (kept.empty() || o.seconds < kept.back().seconds) kept.push_back(o);
    if (kept.empty()) return invalid("job '" + job.name + "' trains at 0 samples/s on every GPU count it accepts");
    out.push_back(std::move(kept));
  }
  return out;
}

Schedule serial_schedule(const std::vector<std::string>& names, const std::vector<std::vector<TimedOption>>& options,
                         const std::vector<size_t>& picked, const std::vector<size_t>& order, int gpus) {
  Schedule s;
  s.jobs.resize(options.size());
  std::vector<Interval> placed;
  for (size_t j : order) {
    const TimedOption& o = options[j][picked[j]];
    const double t = earliest_start(placed, o.option.gpus, o.seconds, gpus);
    placed.push_back({t, t + o.seconds, o.option.gpus});
    s.jobs[j] = {names[j], o, t, t + o.seconds, {}};
    s.makespan_s = std::max(s.makespan_s, t + o.seconds);
  }
  assign_gpu_ids(s, gpus);
  return s;
}

Schedule greedy_schedule(const std::vector<std::string>& names, const std::vector<std::vector<TimedOption>>& options,
                         int gpus) {
  const size_t n = options.size();
  std::vector<size_t> fastest(n), leanest(n);
  for (size_t j = 0; j < n; ++j) {
    fastest[j] = options[j].size() - 1;  // the options get faster as they get wider
    for (size_t o = 0; o < options[j].size(); ++o) {
      const auto area = [&](size_t k) { return options[j][k].seconds * options[j][k].option.gpus; };
      if (area(o) < area(leanest[j])) leanest[j] = o;
    }
  }
  std::optional<Schedule> best;
  for (const auto* picked : {&fastest, &leanest}) {
    std::vector<size_t> given(n), longest(n);
    std::iota(given.begin(), given.end(), 0);
    longest = given;
    std::stable_sort(longest.begin(), longest.end(), [&](size_t a, size_t b) {
      return options[a][(*picked)[a]].seconds > options[b][(*picked)[b]].seconds;
    });
    for (const auto* order : {&longest, &given}) {
      Schedule s = serial_schedule(names, options, *picked, *order, gpus);
      if (!best || s.makespan_s < best->makespan_s) best = std::move(s);
    }
  }
  return best ? std::move(*best) : Schedule{};
}

Result<MakespanMilp> makespan_milp(const std::vector<std::vector<TimedOption>>& options, int gpus, double slot_s,
                                   size_t max_columns) {
  if (!(slot_s > 0) || !std::isfinite(slot_s)) return invalid("the slot length must be > 0 seconds");
  if (gpus < 1) return invalid("gpus must be at least 1, got " + std::to_string(gpus));
  MakespanMilp m;
  m.slot_s = slot_s;
  const auto slotted = in_slots(options, slot_s);
  const std::vector<std::string> no_names(options.size());
  const Schedule greedy = greedy_schedule(no_names, slotted, gpus);
  m.slots = static_cast<int>(std::llround(greedy.makespan_s));
  // Its size before it is built: a column per start slot, each in its job's two rows, the
  // area row and the d slots it runs through (so the terms grow as slots squared).
  size_t columns = 1, terms = 0;
  for (const auto& job : slotted)
    for (const auto& o : job) {
      const auto starts = static_cast<size_t>(std::max(0.0, m.slots - o.seconds + 1));
      columns += starts;
      terms += starts * (3 + static_cast<size_t>(o.seconds));
    }
  if (columns > max_columns || terms > kMaxMakespanTerms)
    return invalid("the schedule needs " + std::to_string(m.slots) + " slots of " + std::to_string(slot_s) +
                   " s: " + std::to_string(columns) + " variables and " + std::to_string(terms) + " terms (about " +
                   std::to_string((terms * kBytesPerTerm + columns * 64) >> 20) +
                   " MiB to build and solve), more than " + std::to_string(max_columns) + " variables or " +
                   std::to_string(kMaxMakespanTerms) + " terms: use fewer, longer slots (--slots)");

  Milp& p = m.milp;
  const size_t n = options.size();
  std::vector<MilpRow> once(n), ends(n), capacity(static_cast<size_t>(m.slots));
  MilpRow area{"area", {}, -std::numeric_limits<double>::infinity(), 0};
  m.durations.resize(n);
  for (size_t j = 0; j < n; ++j) {
    once[j] = {"job" + std::to_string(j) + "_once", {}, 1, 1};
    ends[j] = {"job" + std::to_string(j) + "_ends", {}, -std::numeric_limits<double>::infinity(), 0};
    for (size_t o = 0; o < slotted[j].size(); ++o) {
      const int d = static_cast<int>(slotted[j][o].seconds);
      const int g = slotted[j][o].option.gpus;
      m.durations[j].push_back(d);
      for (int t = 0; t + d <= m.slots; ++t) {
        const int c = p.add_column({"x_" + std::to_string(j) + "_" + std::to_string(o) + "_" + std::to_string(t)});
        m.x.push_back({j, o, t});
        once[j].terms.emplace_back(c, 1.0);
        ends[j].terms.emplace_back(c, t + d);
        area.terms.emplace_back(c, static_cast<double>(g) * d);
        for (int s = t; s < t + d; ++s) capacity[static_cast<size_t>(s)].terms.emplace_back(c, g);
      }
    }
  }
  m.makespan_column = p.add_column({"C", 0, static_cast<double>(m.slots), true, 1.0});
  for (auto& r : ends) r.terms.emplace_back(m.makespan_column, -1.0);
  area.terms.emplace_back(m.makespan_column, -static_cast<double>(gpus));
  for (size_t s = 0; s < capacity.size(); ++s) {
    capacity[s].name = "slot" + std::to_string(s);
    capacity[s].hi = gpus;
  }
  for (auto* rows : {&once, &ends, &capacity})
    for (auto& r : *rows) p.rows.push_back(std::move(r));
  p.rows.push_back(std::move(area));

  // The greedy schedule in slots as a starting solution.
  m.start.assign(p.columns.size(), 0.0);
  for (size_t k = 0; k < m.x.size(); ++k) {
    const auto& x = m.x[k];
    const ScheduledJob& sj = greedy.jobs[x.job];
    if (sj.option.option.gpus == slotted[x.job][x.option].option.gpus && std::llround(sj.start_s) == x.slot)
      m.start[k] = 1;
  }
  m.start[static_cast<size_t>(m.makespan_column)] = m.slots;
  return m;
}

Result<Schedule> schedule_from_solution(const MakespanMilp& m, const std::vector<std::string>& names,
                                        const std::vector<std::vector<TimedOption>>& options, int gpus,
                                        const std::vector<double>& values) {
  if (values.size() != m.milp.columns.size())
    return invalid("the solution has " + std::to_string(values.size()) + " values for " +
                   std::to_string(m.milp.columns.size()) + " variables");
  const size_t n = options.size();
  std::vector<int> slot(n, -1);
  std::vector<size_t> picked(n, 0);
  for (size_t k = 0; k < m.x.size(); ++k) {
    if (values[k] < 0.5) continue;
    const auto& x = m.x[k];
    if (slot[x.job] >= 0) return invalid("the solution starts job '" + names[x.job] + "' twice");
    slot[x.job] = x.slot;
    picked[x.job] = x.option;
  }
  for (size_t j = 0; j < n; ++j)
    if (slot[j] < 0) return invalid("the solution never starts job '" + names[j] + "'");
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slot[a] < slot[b]; });
  return serial_schedule(names, options, picked, order, gpus);
}

}  // namespace ptcfs::planner
