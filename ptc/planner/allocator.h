// The GPU allocator: divides N GPUs among training jobs to maximise their total throughput,
// by the dynamic program of Saxena, Jayaram et al. 2020 ("Effective Elastic Scaling of Deep
// Learning Workloads", MASCOTS 2020): with J jobs and options o = (gpus, global batch,
// samples/s) per job,
//   best[j][g] = max over options o of job j with o.gpus <= g of best[j-1][g - o.gpus] + o.rate
//   best[0][g] = 0,
// the best total of the first j jobs on at most g GPUs; best[J][N] is the answer and the
// choices that reached it the allocation (a GPU count and a global batch per job), in
// O(J x N x options). The objective is plain samples/s, and the admission rule below is ptcfs's:
// what the paper's text says of either was not available (docs/PLANNER.md says what is from it).
//
// Jobs are admitted in the order given (first come, first served) while the smallest counts
// they accept fit together; a job that does not fit waits in the queue, with every job after
// it, and gets no GPU.
//
// JOBS.json:
//   {"jobs": [{"name": "bert", "min_gpus": 1, "max_gpus": 8,
//              "throughput": {"1": 210.5, "2": 400, "4": 760, "8": 1300}},
//             {"name": "gpt", "min_gpus": 4, "max_gpus": 64, "model": {...MODEL.json...}},
//             {"name": "vit", "min_gpus": 1, "max_gpus": 8, "batch": {"min": 256, "max": 1024},
//              "throughput": {"1": {"256": 90}, "2": {"256": 170, "512": 185}}}]}
// A job gets only GPU counts in [min_gpus, max_gpus] at which its throughput is known:
// measured points (samples/s; points outside the range are ignored), or counts at which the
// planner (planner.h) finds a configuration that fits, at global_batch / step seconds of
// the best one. Optional "batch" (a range {"min", "max"} or a list of global batches): the
// options are (GPU count, global batch) pairs, measured per batch (throughput: GPU count ->
// global batch -> samples/s) or planned with the model's global_batch set to each batch of
// the list, or of the range min, 2 min, 4 min, ... and max. Optional "samples": how many
// samples the job trains in all (the makespan policy, makespan.h, needs it to know how long
// a job runs on each option). Optional "current": {"gpus": G, "global_batch": B} (B optional),
// what a running job runs on now, and "move_seconds": what changing it costs the job (its
// pause: a restart and its state moved); with a horizon, allocate_throughput weighs the
// move (weigh_moves below).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ptc/planner/cost_model.h"

namespace ptcfs::planner {

// The global batches a job accepts: every batch in [min, max], or only those listed.
struct BatchChoice {
  int64_t min = 0, max = 0;
  std::vector<int64_t> listed;  // ascending; empty: the whole range
  bool accepts(int64_t batch) const;
};

struct ThroughputPoint {
  int gpus = 0;
  double samples_per_s = 0;
  int64_t batch = 0;  // 0: the job gives no batch
  bool operator==(const ThroughputPoint&) const = default;
};

// What a running job runs on now: its GPU count and, when given, its global batch.
struct Running {
  int gpus = 0;
  int64_t global_batch = 0;  // 0: not given (any batch on `gpus` GPUs is the current one)
  bool operator==(const Running&) const = default;
};

struct JobSpec {
  std::string name;
  int min_gpus = 1, max_gpus = 1;
  std::optional<BatchChoice> batch;     // none: the job's batch is fixed (not chosen here)
  std::vector<ThroughputPoint> points;  // measured, by (gpus, batch) ascending
  std::optional<ModelSpec> model;       // instead of points: the cost model
  std::optional<double> samples;        // samples to train (needed by the makespan policy)
  std::optional<Running> current;       // running now: changing it costs move_seconds
  double move_seconds = 0;
};

// Parses JOBS.json (strict: unknown keys, repeated names, empty lists, min > max, a job with
// both or neither of throughput and model, per-batch points without "batch" or plain points
// with it are refused, naming the job and member).
Result<std::vector<JobSpec>> parse_jobs_json(std::string_view text, const std::string& where);

// One GPU count and global batch a job may get, with its throughput (and, for a modelled job,
// the configuration that reaches it).
struct JobOption {
  int gpus = 0;
  double samples_per_s = 0;
  std::optional<ParallelConfig> config;
  int64_t global_batch = 0;  // 0: not known (measured points without a batch)
  double weight = 1;         // the dynamic program counts samples_per_s x weight (weigh_moves)
};

// The batches tried for a modelled job: the listed ones, or min, 2 min, 4 min, ... and max.
std::vector<int64_t> batches_to_plan(const BatchChoice& batch);

// The options of `job` on a cluster of `gpus` GPUs, by (GPU count, global batch) ascending. kInvalidArgument
// when it has none (naming the job and why).
Result<std::vector<JobOption>> job_options(const JobSpec& job, int gpus);

// Weighs a running job's moves over the next `horizon_s` seconds (docs/PLANNER.md "Weighing
// moves"): an option other than job.current pauses the job for move_seconds, so it trains for
// horizon_s - move_seconds of them and its weight is 1 - move_seconds / horizon_s, at least 1e-9
// (a move that cannot pay back still ranks by its rate, for a job whose current option is gone); the
// current option (same GPU count, and batch when both current and the option give one) keeps
// weight 1. A job
// without current (new: it starts whichever option it gets) or move_seconds, or a horizon <= 0,
// is left as it is.
void weigh_moves(const JobSpec& job, double horizon_s, std::vector<JobOption>& options);

// The dynamic program: one option per job, GPUs summing to at most `gpus`, the largest sum
// of samples_per_s x weight (added in job order). Returns the chosen option's index for every job,
// or nullopt when even the first options do not fit together. Ties keep the first choice
// found (fewer GPUs to the later jobs).
std::optional<std::vector<size_t>> max_total_throughput(const std::vector<std::vector<JobOption>>& options, int gpus);
// Its table holds a 4-byte choice per job and GPU count; allocate_options refuses more cells
// than this (512 MiB) before building it.
inline constexpr size_t kMaxTableCells = size_t{1} << 27;

struct JobAllocation {
  std::string name;
  bool queued = false;  // not admitted: no GPUs this round
  JobOption option;     // gpus 0 when queued
};

struct Allocation {
  std::vector<JobAllocation> jobs;  // in the order given
  int gpus_used = 0;
  double samples_per_s = 0;  // the chosen options' own rates (not weighed)
};

// Admits the jobs first come, first served, and divides `gpus` among the admitted ones by
// max_total_throughput, each job's moves weighed over `horizon_s` (0: not weighed).
// kInvalidArgument for gpus < 1, a job whose smallest count is more than `gpus`, or a job
// with no options.
Result<Allocation> allocate_throughput(const std::vector<JobSpec>& jobs, int gpus, double horizon_s = 0);

// allocate_throughput over options already known: options[j] those of job names[j] on `gpus`
// GPUs, as job_options gives them (so that a caller that needs them too computes them once).
// kInvalidArgument for gpus < 1, names and options of different lengths, or a job with none.
Result<Allocation> allocate_options(const std::vector<std::string>& names, std::vector<std::vector<JobOption>> options,
                                    int gpus);

}  // namespace ptcfs::planner
