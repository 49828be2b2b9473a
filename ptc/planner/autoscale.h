// The autoscaler's decisions (docs/PLANNER.md "The autoscaler"), pure: given the job queue
// in submit order and the GPUs there are, what each job runs on (GPU count, global batch,
// tp, pp, dp, micro-batch) or that it waits; and which of those differ from the decisions
// already carried out. `ptcfs autoscale` (cli/autoscale_cmd.h) reads the queue from etcd,
// carries the changed decisions out through the daemons and writes them back.
//
// A queue entry (the value of <prefix>/queue/<job>):
//   {"job": {...one JOBS.json entry (allocator.h); "name" may be left out...},
//    "daemon": "HOST:PORT", "store_job": "NAME", "layout": {"tp": T, "pp": P}, "samples_done": N,
//    "samples_done_step": S}
// daemon: the ptcfsd that holds the job's steps; store_job: the job's name there (default:
// its queue name); samples_done (with job.samples; default 0): the samples the job has
// trained, as whoever runs it records them, so that the makespan policy plans what remains;
// samples_done_step (with samples_done; an integer >= 0): the step the count reaches, which
// makes the recording writer's update idempotent (the planner does not use it);
// layout (measured jobs only; default tp 1, pp 1): the model-parallel part
// kept at every count, so dp = gpus / (tp pp), and only counts that tp pp divides (and whose
// dp divides the batch) are options. A modelled job's configuration is the planner's best
// without interleaved stages (a repartitioned step holds contiguous layers per stage).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ptc/planner/allocator.h"
#include "ptc/planner/makespan.h"

namespace ptcfs::planner {

struct QueueEntry {
  JobSpec spec;  // spec.name is the queue name
  int tp = 1, pp = 1;
  std::string daemon;
  std::string store_job;
  double samples_done = 0;                   // of spec.samples, in [0, samples)
  std::optional<int64_t> samples_done_step;  // the step samples_done reaches, when recorded
};

// Parses one queue value of job `name` (strict: unknown keys, a "job.name" other than `name`,
// a layout on a modelled job, tp or pp < 1, samples_done without job.samples or outside
// [0, samples), samples_done_step without samples_done or not an integer >= 0 are refused,
// naming `where` and the member).
Result<QueueEntry> parse_queue_entry(std::string_view text, const std::string& name, const std::string& where);

struct Decision {
  std::string job;
  bool queued = false;         // waits: no GPUs this round
  int gpus = 0;                // 0 when queued
  int64_t global_batch = 0;    // 0: not chosen here (a measured job without "batch")
  int tp = 0, pp = 0, dp = 0;  // 0 when queued
  int64_t micro_batch = 0;     // 0: the trainer's choice (measured jobs) or queued
  bool operator==(const Decision&) const = default;
};

// The decision as stored in <prefix>/decision/<job>, with what carrying it out recorded:
// the step repartitioned (empty: none), a sequence number and the controller's id.
struct StoredDecision {
  Decision decision;
  std::string step;
  int64_t seq = 0;
  std::string controller;
};
std::string stored_decision_json(const StoredDecision& d);
// Strict, as parse_queue_entry: every count bounded (GPUs, tp, pp, dp at most kMaxDecisionGpus; batches
// at most kMaxBatch) and a running decision's gpus = tp x pp x dp; anything else is refused,
// naming `where`, so that a hostile or damaged record never counts as GPUs in use.
Result<StoredDecision> parse_stored_decision(std::string_view text, const std::string& job, const std::string& where);
inline constexpr int64_t kMaxDecisionGpus = 1 << 20;  // a capacity's bound (the controller's too)
inline constexpr int64_t kMaxBatch = int64_t{1} << 40;

// Queue entries that name a store job (daemon and store_job) an earlier entry names (in queue
// order): (index, why). Two jobs would repartition one step; the later is left out.
std::vector<std::pair<size_t, std::string>> duplicate_store_jobs(const std::vector<QueueEntry>& queue);

// The specs the allocator sees: measured points at counts the layout does not divide (or
// whose dp does not divide the point's batch) dropped, modelled jobs without interleaving,
// `samples` what remains (samples - samples_done: a running job is planned on its rest).
std::vector<JobSpec> autoscale_specs(const std::vector<QueueEntry>& queue);

// The options (job_options on `gpus` GPUs) of the jobs from the front of `specs` that may run
// there, first come, first served: those before the first with no option there (min_gpus
// above `gpus`, or no usable count). Its size is how many; the policies take these options
// as they are (allocate_options, timed_options), so that each job's are computed once a pass.
std::vector<std::vector<JobOption>> fitting_options(const std::vector<JobSpec>& specs, int gpus);

// The makespan policy's decisions now: the jobs a schedule starts at time 0 get their
// option, the others are queued (to be decided again when a job ends).
std::vector<JobAllocation> starting_now(const Schedule& schedule);

// Decisions by total throughput (allocator.h's dynamic program) for `gpus` GPUs, one per
// entry, in queue order. First come, first served: the first job that has no option on
// `gpus` GPUs waits, with every job after it. With horizon_s > 0, a job that runs on its
// decision in `running` (not queued) has its moves weighed over horizon_s seconds
// (allocator.h weigh_moves; its cost is its JOBS.json move_seconds). kInvalidArgument for gpus < 0.
Result<std::vector<Decision>> decide_throughput(const std::vector<QueueEntry>& queue, int gpus,
                                                const std::map<std::string, Decision>& running = {},
                                                double horizon_s = 0);

// Decisions from an allocation of autoscale_specs(queue) (any policy): a job allocated no
// GPUs is queued. `allocated` is in queue order.
std::vector<Decision> decisions_from(const std::vector<QueueEntry>& queue, const std::vector<JobAllocation>& allocated);

// What a pass does: the decisions to carry out (new, or different from the stored one) and the
// jobs with a stored decision that left the queue (finished). `changed` holds first the
// `shrinks` decisions that give a job fewer GPUs than its stored one (queued counts as 0), then
// the others (new jobs, grows, same count in another configuration), each part in queue order:
// GPUs are freed before they are given.
struct Changes {
  std::vector<Decision> changed;
  size_t shrinks = 0;
  std::vector<std::string> finished;
};
Changes changes(const std::vector<Decision>& next, const std::map<std::string, Decision>& stored);

// The latest of a job's steps: by number when both are decimal numbers, else by name.
std::optional<std::string> latest_step(const std::vector<std::string>& steps);

}  // namespace ptcfs::planner
