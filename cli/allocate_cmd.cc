#include "cli/allocate_cmd.h"

#include <fmt/core.h>

#include <chrono>
#include <cmath>

#include "cli/milp_glpk.h"
#include "cli/plan_cmd.h"
#include "cli/validators.h"
#include "ptc/planner/allocator.h"
#include "ptc/planner/makespan.h"

namespace ptcfs::cli {

using nlohmann::json;

CLI::App* add_allocate_command(CLI::App& app, AllocateArgs& a, Globals& g) {
  auto* cmd = app.add_subcommand(
      "allocate",
      "Divide N GPUs among jobs (JOBS.json: each a GPU range, optionally a global-batch range, and measured "
      "throughput or a MODEL.json): "
      "now, to maximise their total samples/s (throughput), or over time, to finish the whole queue "
      "first (makespan; each job needs 'samples'); docs/PLANNER.md; needs no daemon");
  cmd->add_option("--jobs", a.jobs_file, "JOBS.json")->required();
  cmd->add_option("--gpus", a.gpus, "Number of GPUs (N)")->required()->check(non_negative());
  cmd->add_option("--policy", a.policy,
                  "throughput: Saxena et al.'s dynamic program; makespan: Saturn's selection, allocation and "
                  "schedule as a MILP (GLPK)")
      ->check(CLI::IsMember({"throughput", "makespan"}));
  cmd->add_option("--time-limit", a.time_limit_s,
                  "makespan: seconds the solver may search (best found and its gap "
                  "are printed)")
      ->check(CLI::Range(0.01, 86400.0));
  cmd->add_option("--slots", a.slots,
                  "makespan: time slots of the program (the greedy schedule's length cut in this "
                  "many; more is finer and slower)")
      ->check(CLI::Range(2, 100000));
  cmd->add_option("--horizon", a.horizon_s,
                  "throughput: weigh moves over this many seconds: a job that gives 'current' and 'move_seconds' "
                  "counts any other option at 1 - move_seconds / SECONDS of its samples/s (docs/PLANNER.md)")
      ->check(CLI::Range(1e-3, 1e9));
  cmd->add_flag("--json", g.json, "Print the allocation as JSON");
  return cmd;
}

namespace {

std::string config_text(const planner::JobOption& o) {
  if (!o.config) return "";
  return fmt::format("tp={},{}pp={},dp={},micro_batch={}", o.config->tp,
                     o.config->cp > 1 ? fmt::format("cp={},", o.config->cp) : "", o.config->pp, o.config->dp,
                     o.config->micro_batch);
}

// GPU ids as ranges: 0-3,8,10-11.
std::string id_ranges(const std::vector<int>& ids) {
  std::string out;
  for (size_t k = 0; k < ids.size();) {
    size_t e = k;
    while (e + 1 < ids.size() && ids[e + 1] == ids[e] + 1) ++e;
    out += (out.empty() ? "" : ",") + std::to_string(ids[k]) + (e > k ? "-" + std::to_string(ids[e]) : "");
    k = e + 1;
  }
  return out;
}

json batch_json(const planner::JobOption& o) { return o.global_batch ? json(o.global_batch) : json(nullptr); }

std::string batch_cell(const planner::JobOption& o) { return o.global_batch ? std::to_string(o.global_batch) : "-"; }

json option_config_json(const planner::JobOption& o) { return o.config ? config_json(*o.config) : json(nullptr); }

}  // namespace

Result<MakespanSolution> solve_makespan(const std::vector<planner::JobSpec>& jobs, int gpus, int slots,
                                        double time_limit_s) {
  PTC_ASSIGN_OR_RETURN(auto options, planner::timed_options(jobs, gpus));
  return solve_makespan(jobs, options, gpus, slots, time_limit_s);
}

Result<MakespanSolution> solve_makespan(const std::vector<planner::JobSpec>& jobs,
                                        const std::vector<std::vector<planner::TimedOption>>& options, int gpus,
                                        int slots, double time_limit_s) {
  std::vector<std::string> names;
  for (const auto& j : jobs) names.push_back(j.name);
  MakespanSolution out;
  out.greedy = planner::greedy_schedule(names, options, gpus);
  PTC_ASSIGN_OR_RETURN(out.program, planner::makespan_milp(options, gpus, out.greedy.makespan_s / slots));
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(time_limit_s * 1000));
  PTC_ASSIGN_OR_RETURN(out.answer, solve_milp_glpk(out.program.milp, limit, out.program.start),
                       "solving the makespan program");
  PTC_ASSIGN_OR_RETURN(auto solved,
                       planner::schedule_from_solution(out.program, names, options, gpus, out.answer.values),
                       "GLPK's solution");
  out.schedule = solved.makespan_s <= out.greedy.makespan_s ? std::move(solved) : out.greedy;
  return out;
}

namespace {

int run_makespan(const AllocateArgs& a, const Globals& g, const std::vector<planner::JobSpec>& jobs) {
  auto solved = solve_makespan(jobs, a.gpus, a.slots, a.time_limit_s);
  if (!solved) return fail(solved.status().with_context(a.jobs_file));
  const MilpAnswer* answer = &solved->answer;
  const planner::MakespanMilp* program = &solved->program;
  const planner::Schedule& greedy = solved->greedy;
  const planner::Schedule& s = solved->schedule;
  // The program's makespan is a whole number of slots, so its bound rounds up. Both are of the
  // program (run times rounded up to slots), not of the real schedule, which is never longer.
  const double bound_slots = std::ceil(answer->bound - 1e-6);
  if (g.json) {
    json out = {{"policy", "makespan"},
                {"gpus", a.gpus},
                {"makespan_s", s.makespan_s},
                {"greedy_makespan_s", greedy.makespan_s},
                {"solver",
                 {{"name", answer->solver},
                  {"optimal", answer->optimal},
                  {"gap", std::isfinite(answer->gap) ? json(answer->gap) : json(nullptr)},
                  {"makespan_slots", std::llround(answer->objective)},
                  {"bound_slots", std::isfinite(bound_slots) ? json(std::max(0.0, bound_slots)) : json(nullptr)},
                  {"seconds", answer->seconds},
                  {"slots", program->slots},
                  {"slot_seconds", program->slot_s},
                  {"variables", program->milp.columns.size()}}},
                {"jobs", json::array()}};
    for (const auto& j : s.jobs)
      out["jobs"].push_back({{"name", j.name},
                             {"gpus", j.option.option.gpus},
                             {"samples_per_s", j.option.option.samples_per_s},
                             {"global_batch", batch_json(j.option.option)},
                             {"seconds", j.option.seconds},
                             {"start_s", j.start_s},
                             {"end_s", j.end_s},
                             {"gpu_ids", j.gpu_ids},
                             {"config", option_config_json(j.option.option)}});
    return print_json(out);
  }
  fmt::print("{} on {} GPUs (makespan): every job done after {:.6g} s (greedy list schedule: {:.6g} s)\n", a.jobs_file,
             a.gpus, s.makespan_s, greedy.makespan_s);
  fmt::print("solver: {}, {}, gap {}, {:.2f} s, {} slots of {:.6g} s, {} variables\n", answer->solver,
             answer->optimal ? "optimal" : "stopped at the time limit",
             std::isfinite(answer->gap) ? fmt::format("{:.1f}%", 100 * answer->gap) : std::string("unknown"),
             answer->seconds, program->slots, program->slot_s, program->milp.columns.size());
  fmt::print("{:<20} {:>6} {:>12} {:>12}  {:<16} {}\n", "job", "gpus", "start_s", "end_s", "GPU ids", "configuration");
  for (const auto& j : s.jobs) {
    fmt::print("{:<20} {:>6} {:>12.6g} {:>12.6g}  {:<16} {}\n", j.name, j.option.option.gpus, j.start_s, j.end_s,
               id_ranges(j.gpu_ids), config_text(j.option.option));
  }
  return 0;
}

}  // namespace

int run_allocate(const AllocateArgs& a, const Globals& g) {
  auto text = read_text_file(a.jobs_file, size_t{16} << 20);  // 10,000 jobs take under 1 MiB
  if (!text) return fail(text.status());
  auto jobs = planner::parse_jobs_json(*text, a.jobs_file);
  if (!jobs) return fail(jobs.status());
  if (a.policy == "makespan") {
    if (a.horizon_s > 0)
      return fail(invalid("--horizon weighs moves for --policy throughput; the makespan program plans whole runs"));
    return run_makespan(a, g, *jobs);
  }
  auto r = planner::allocate_throughput(*jobs, a.gpus, a.horizon_s);
  if (!r) return fail(r.status().with_context(a.jobs_file));
  const planner::Allocation& alloc = *r;
  if (g.json) {
    json out = {{"policy", a.policy},
                {"gpus", a.gpus},
                {"gpus_used", alloc.gpus_used},
                {"samples_per_s", alloc.samples_per_s},
                {"jobs", json::array()}};
    for (const auto& j : alloc.jobs) {
      json e = {{"name", j.name},
                {"queued", j.queued},
                {"gpus", j.option.gpus},
                {"samples_per_s", j.option.samples_per_s},
                {"global_batch", j.queued ? json(nullptr) : batch_json(j.option)}};
      if (j.option.config) e["config"] = config_json(*j.option.config);
      out["jobs"].push_back(std::move(e));
    }
    return print_json(out);
  }
  fmt::print("{} on {} GPUs ({}): {} used, {:.6g} samples/s in all\n", a.jobs_file, a.gpus, a.policy, alloc.gpus_used,
             alloc.samples_per_s);
  fmt::print("{:<20} {:>6} {:>12} {:>12}  {}\n", "job", "gpus", "samples/s", "global_batch", "configuration");
  for (const auto& j : alloc.jobs) {
    if (j.queued)
      fmt::print("{:<20} {:>6} {:>12} {:>12}  {}\n", j.name, 0, "-", "-", "queued (its smallest count does not fit)");
    else
      fmt::print("{:<20} {:>6} {:>12.6g} {:>12}  {}\n", j.name, j.option.gpus, j.option.samples_per_s,
                 batch_cell(j.option), config_text(j.option));
  }
  return 0;
}

}  // namespace ptcfs::cli
