// `ptcfs plan`: the parallelism planner (ptc/planner/planner.h) for a MODEL.json and N GPUs, printed
// as a table or as JSON. It needs no daemon unless --from asks one what each candidate's
// repartition would move.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "ptc/planner/planner.h"

namespace ptcfs::cli {

struct PlanArgs {
  std::string model_file;
  int gpus = 0;
  int gpus_per_node = 0;
  CLI::Option* gpus_per_node_opt = nullptr;  // not given: the model's gpu.per_node
  int top = -1;                              // -1: 10 in the table, all in JSON; 0: all
  std::string from;                          // JOB/STEP, or empty
  int64_t horizon = 0;                       // with from: rank by step time + move time / horizon (0: by step time)
};

CLI::App* add_plan_command(CLI::App& app, PlanArgs& a, Globals& g);
int run_plan(const PlanArgs& a, const Globals& g);

// The planner's best configuration of MODEL.json on `gpus` GPUs (`repartition --gpus N
// --model MODEL.json`); the errors of `ptcfs plan`.
Result<planner::Candidate> best_plan(const std::string& model_file, int gpus);

// A configuration as `plan --json`, `allocate --json` and `repartition --json` write it:
// {tp, cp, pp, dp, micro_batch, virtual_stages}.
nlohmann::json config_json(const planner::ParallelConfig& c);
// The same with the candidate's memory_gb, step_seconds and tflops_per_gpu.
nlohmann::json candidate_json(const planner::Candidate& c);

}  // namespace ptcfs::cli
