// The parallelism planner: for a model and N GPUs, every valid (tp, pp, dp, micro_batch)
// that fits in GPU memory, ranked by predicted step time (cost_model.h). Pure and
// deterministic; `ptcfs plan` prints what it returns.
//
// Valid, for N GPUs:
//   tp divides heads, query_groups and ffn (Megatron splits heads, key/value groups and the
//      MLP's columns evenly), and tp <= gpu.per_node (a tensor-parallel group stays within
//      a node: its all-reduces run on every layer);
//   pp <= layers (stages take contiguous layers, earlier ones the remainder); with
//      pipeline_split embedding_and_loss pp divides layers + 2;
//   cp (when MODEL.json's context_parallel is true, else 1): 2 cp divides seq;
//   dp = N / (tp x cp x pp) exactly, dp divides global_batch, and micro_batch divides
//      global_batch / dp.
//   virtual_stages v (when MODEL.json's interleave is true, else 1): v = 1, or v > 1 with
//      pp > 1, pp x v dividing the layers (+ 2 with the embedding-and-loss split) and pp
//      dividing the micro-batches global_batch / (dp x micro_batch) (Narayanan et al.
//      2021, section 2.2.2).
// Fits: the largest stage's memory (weights, gradients, optimizer state, activations) is at
// most gpu.memory_gb GiB.
#pragma once

#include <vector>

#include "ptc/planner/cost_model.h"

namespace ptcfs::planner {

struct Candidate {
  ParallelConfig config;
  MemoryEstimate memory;
  StepEstimate step;
  double memory_gb() const;  // memory.total() in GiB
  double step_seconds() const { return step.total(); }
  double tflops_per_gpu() const;  // step.flops / (gpus x step seconds), in TFLOP/s
};

// kInvalidArgument naming the rule `c` breaks for `m` (the rules above; N = c.gpus()).
Status validate_config(const ModelSpec& m, const ParallelConfig& c);
// Every valid configuration of exactly `gpus` GPUs, by tp, then cp, then pp, then
// micro_batch, then virtual_stages.
std::vector<ParallelConfig> valid_configs(const ModelSpec& m, int gpus);
Candidate evaluate(const ModelSpec& m, const ParallelConfig& c);
bool fits(const ModelSpec& m, const MemoryEstimate& e);

// The order of plan(): shorter step first; then less memory; then smaller tp, cp, pp,
// micro_batch, virtual_stages. A strict total order on distinct configurations.
bool better(const Candidate& a, const Candidate& b);

// The candidates that fit, best first. kInvalidArgument when gpus < 1, when no
// configuration is valid (naming the rules), or when none fits (naming the configuration
// that needs the least memory, what it needs and how much more than a GPU has).
Result<std::vector<Candidate>> plan_parallelism(const ModelSpec& m, int gpus);

// `m` limited to the layouts a repartitioned step has (docs/FORMATS.md "ptc.json": each
// stage's layers contiguous and as even as possible; every rank a whole sequence): no
// interleaved stages, the even split, no context parallelism.
// What `repartition --gpus` and the autoscaler plan with.
ModelSpec as_stored(ModelSpec m);

}  // namespace ptcfs::planner
