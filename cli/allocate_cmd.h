// `ptcfs allocate`: divides N GPUs among the jobs of a JOBS.json, printed as a table or as
// JSON: at one instant by total throughput (ptc/planner/allocator.h), or over time by makespan
// (ptc/planner/makespan.h, solved with GLPK). Needs no daemon.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "cli/milp_glpk.h"
#include "ptc/planner/makespan.h"

namespace ptcfs::cli {

struct AllocateArgs {
  std::string jobs_file;
  int gpus = 0;
  std::string policy = "throughput";
  double time_limit_s = 10;  // makespan: the solver's limit
  int slots = 40;            // makespan: the greedy schedule's length is cut into this many slots
  double horizon_s = 0;      // throughput: weigh running jobs' moves over this many seconds (0: not)
};

CLI::App* add_allocate_command(CLI::App& app, AllocateArgs& a, Globals& g);
int run_allocate(const AllocateArgs& a, const Globals& g);

// The makespan policy's answer: the schedule (the solver's, or the greedy one when that is no
// longer), the greedy schedule, the program and the solver's answer.
struct MakespanSolution {
  planner::Schedule schedule, greedy;
  planner::MakespanMilp program;
  MilpAnswer answer;
};
Result<MakespanSolution> solve_makespan(const std::vector<planner::JobSpec>& jobs, int gpus, int slots,
                                        double time_limit_s);
// The same on options already timed (planner::timed_options), options[j] those of jobs[j].
Result<MakespanSolution> solve_makespan(const std::vector<planner::JobSpec>& jobs,
                                        const std::vector<std::vector<planner::TimedOption>>& options, int gpus,
                                        int slots, double time_limit_s);

}  // namespace ptcfs::cli
