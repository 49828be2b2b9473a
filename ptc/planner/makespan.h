// The makespan policy of the allocator: choose each job's GPU count (and, for a modelled
// job, its parallelism), the GPUs it runs on and when it starts, so that a queue of jobs
// finishes as early as possible. This is the joint selection, allocation and scheduling
// problem of Saturn (Nagrecha and Kumar, 2023), solved the way Saturn solves it: as a MILP.
//
// Job j on option o (g_jo GPUs) trains its `samples` at the option's samples/s, for
// seconds_jo = samples_j / rate_jo, without preemption. Time is cut into H slots of
// `slot_s` seconds and a job holds its GPUs for d_jo = ceil(seconds_jo / slot_s) slots.
// The time-indexed program (Pritsker et al. 1969; Saturn's is of this kind):
//
//   x[j,o,t] in {0,1}: job j runs option o from slot t (t + d_jo <= H)     C >= 0
//   minimise C
//   for each job j:     sum_(o,t) x[j,o,t] = 1
//                       sum_(o,t) (t + d_jo) x[j,o,t] <= C                  (j ends by C)
//   for each slot s:    sum_(j,o,t : t <= s < t + d_jo) g_jo x[j,o,t] <= N  (N GPUs at a time)
//   area:               sum_(j,o,t) g_jo d_jo x[j,o,t] <= N C                (a valid cut)
//
// A solution is turned into a schedule by the serial schedule generation scheme (Kolisch
// 1996) over the jobs in the order of their slots, with their real (unrounded) run times:
// each job starts at the earliest time its GPU count is free. That never starts a job
// later than its slot (the jobs before it end no later than their slots), so the
// schedule's makespan is at most C * slot_s. GPUs get ids 0..N-1, the lowest free first,
// so no GPU runs two jobs at once.
//
// Every job must fit the cluster on some option; options that another option beats on
// both GPUs and time are dropped first (they are never needed for the optimum).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ptc/planner/allocator.h"
#include "ptc/planner/milp.h"

namespace ptcfs::planner {

struct TimedOption {
  JobOption option;
  double seconds = 0;  // samples / samples_per_s
};

// Each job's useful options with their run times, fewest GPUs first. kInvalidArgument for
// a job without `samples`, one whose smallest count exceeds `gpus`, one with no option,
// or gpus < 1.
Result<std::vector<std::vector<TimedOption>>> timed_options(const std::vector<JobSpec>& jobs, int gpus);
// The same from options already known: options[j] those of jobs[j] (job_options on the
// cluster), so that a caller that needs them too computes them once.
Result<std::vector<std::vector<TimedOption>>> timed_options(const std::vector<JobSpec>& jobs,
                                                            const std::vector<std::vector<JobOption>>& options);

struct ScheduledJob {
  std::string name;
  TimedOption option;
  double start_s = 0, end_s = 0;
  std::vector<int> gpu_ids;  // ascending
};

struct Schedule {
  std::vector<ScheduledJob> jobs;  // in the order of the job list
  double makespan_s = 0;
};

// The serial schedule generation scheme: the jobs in `order`, job j on
// options[j][picked[j]], each started at the earliest time at which its GPUs are free for
// its whole run.
Schedule serial_schedule(const std::vector<std::string>& names, const std::vector<std::vector<TimedOption>>& options,
                         const std::vector<size_t>& picked, const std::vector<size_t>& order, int gpus);

// A good schedule fast: the best of a few list schedules (each job on its fastest option
// and on its option of least GPU-time, longest first and in the order given). An upper
// bound for the program.
Schedule greedy_schedule(const std::vector<std::string>& names, const std::vector<std::vector<TimedOption>>& options,
                         int gpus);

// The time-indexed program for `options` on `gpus` GPUs, in `slots` slots of `slot_s`
// seconds. `x[k]` names the job, option and start slot of column k (the last column is C).
struct MakespanMilp {
  Milp milp;
  double slot_s = 0;
  int slots = 0;
  struct Start {
    size_t job = 0, option = 0;
    int slot = 0;
  };
  std::vector<Start> x;
  int makespan_column = 0;
  std::vector<std::vector<int>> durations;  // d_jo in slots
  // A feasible solution (the greedy schedule in slots), as a starting point for a solver.
  std::vector<double> start;
};

// Builds the program. The horizon is the greedy schedule of the rounded durations, so the
// program always has a solution. kInvalidArgument for slot_s <= 0 or a horizon of more
// than `max_columns` columns (name a coarser slot).
// Also refused before anything is built: more than kMaxMakespanTerms nonzero terms (they grow
// as the slots squared; about kBytesPerTerm bytes each in the program and the solver).
inline constexpr size_t kMaxMakespanTerms = 20'000'000;
inline constexpr size_t kBytesPerTerm = 48;
Result<MakespanMilp> makespan_milp(const std::vector<std::vector<TimedOption>>& options, int gpus, double slot_s,
                                   size_t max_columns = 2'000'000);

// The schedule a solution of the program gives (see the top of this file). kInvalidArgument
// when `values` does not pick exactly one start for every job.
Result<Schedule> schedule_from_solution(const MakespanMilp& m, const std::vector<std::string>& names,
                                        const std::vector<std::vector<TimedOption>>& options, int gpus,
                                        const std::vector<double>& values);

}  // namespace ptcfs::planner
