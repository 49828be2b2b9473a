// The cost model of a parallel configuration of a transformer: memory per GPU and time per
// training step, from published formulas (each cited where it is used, in cost_model.cc).
// Pure: no I/O, no state; the same inputs give the same doubles.
//
// Memory of one GPU of pipeline stage i (the planner keeps the largest over stages):
//   weights + gradients + Adam state = P_i x bytes per parameter (Megatron-LM's
//     distributed-optimizer table: BF16 2 + 4 + 12, or 2 + 4 + 12/dp with a distributed
//     optimizer, gradients of 2 with grad_reduce_in_bf16; F16 2 + 2 + 16; F32 4 + 4 + 8),
//     P_i the parameters of stage i on one TP rank;
//   activations = layers_i x (one layer, one micro-batch: Korthikanti et al. 2022, Table 2)
//     x micro-batches in flight (1F1B: min(pp - i, m) on stage i; interleaved: times
//     1 + (pp - 1) / (pp v), section 4.2.3) + the input and output layers (section 4.3).
// Time of one step, m = global_batch / (dp x micro_batch) micro-batches per pipeline:
//   (m + (pp - 1) / v) x the slowest stage's time per micro-batch (its GEMMs, each at the
//     efficiency its per-GPU shape allows: gemm_seconds; its memory-bound fused operations;
//     its tensor-parallel all-reduces; its pipeline sends): Narayanan et al. 2021's bubble (pp - 1) / (v m) with v
//     interleaved stages;
//   + the data-parallel gradient all-reduce (ring: 2 (dp - 1) / dp x bytes; with a
//     distributed optimizer a reduce-scatter, then an all-gather of the weights), less what
//     the backward pass of the last micro-batch hides with overlap_grad_reduce and the next
//     step's first forward pass with overlap_param_gather, and the tied embeddings' gradient
//     all-reduce between the first and last stage;
//   + the optimizer step (optimizer_step_bytes at the GPU's memory bandwidth).
// With context parallelism (cp > 1) a GPU holds s / cp tokens of each sequence: every term
// that grows with s b is a cp-th, attention scores s / cp queries against s keys, and the
// keys and values pass around a ring beside attention (cp_comm is what it does not hide).
// FLOPs per step generalise Narayanan et al. 2021 eq. 3 (96 B s l h^2 (1 + s/6h + V/16lh)
// with full recomputation) to grouped-query attention, any ffn width and other recompute
// modes. Communication moves at the link's bandwidth with no latency; only the overlaps
// named above hide any of it; a group whose ranks lie on one node uses intra_node_gbps,
// else inter_node_gbps (ranks placed in Megatron's order, rank = t + tp (d + dp p),
// per_node to a node).
//
// Preconditions of every function taking a ParallelConfig: a valid configuration (see
// planner.h, validate_config): tp divides heads, query_groups, hidden and ffn; pp <= layers
// (and pp divides layers + 2 with the embedding-and-loss split); dp x micro_batch divides
// global_batch; with virtual_stages v > 1, pp > 1, v x pp divides the layers (+ 2 with the
// split) and pp divides the micro-batches.
#pragma once

#include <cstdint>

#include "ptc/planner/model_spec.h"

namespace ptcfs::planner {

struct ParallelConfig {
  int tp = 1, pp = 1, dp = 1;
  int64_t micro_batch = 1;
  // Model chunks per pipeline stage (Narayanan et al. 2021, section 2.2.2): 1 is the plain
  // 1F1B schedule; v > 1 the interleaved one, stage i holding chunks i, i + pp, ...
  int virtual_stages = 1;
  // Context parallelism: each sequence's tokens split over cp GPUs (Megatron-LM's
  // --context-parallel-size); ranks t + tp (c + cp (d + dp p)).
  int cp = 1;
  int gpus() const { return tp * cp * pp * dp; }
  bool operator==(const ParallelConfig&) const = default;
};

// The vocabulary as Megatron pads it (--make-vocab-size-divisible-by 128, times tp).
int64_t padded_vocab(const ModelSpec& m, int tp);
// Width of the key and value projections: hidden x query_groups / heads.
int64_t kv_width(const ModelSpec& m);
// Parameters of one transformer layer, all TP ranks together.
int64_t layer_params(const ModelSpec& m);
// Parameters of the model (vocabulary padded for `tp`; an untied output layer adds V x h).
int64_t model_params(const ModelSpec& m, int tp = 1);
// The pipeline's layer slots: the transformer layers, plus the embedding and the loss with
// PipelineSplit::kEmbeddingAndLoss.
int64_t pipeline_slots(const ModelSpec& m);
// Transformer layers of pipeline stage `stage`: the slots in contiguous groups, as even as
// possible, earlier stages taking the remainder (docs/FORMATS.md "ptc.json"); with
// kEmbeddingAndLoss and pp > 1 the first and last stages' embedding and loss take one
// slot each (Megatron-LM's transformer_config.py, which needs pp to divide the slots).
int64_t stage_layers(const ModelSpec& m, int pp, int stage);
// Parameters one GPU of stage `stage` holds.
int64_t gpu_params(const ModelSpec& m, const ParallelConfig& c, int stage);

// Bytes per parameter of weights, gradients and Adam state (the state before any division
// by dp), for mixed-precision training in m.dtype (and BF16 gradients with
// grad_reduce_in_bf16).
struct BytesPerParam {
  double weights = 0, gradients = 0, optimizer = 0;
};
BytesPerParam bytes_per_param(const ModelSpec& m);

// Bytes of device memory the optimizer step moves for `params` parameters held by one GPU
// (all of them before any division by dp): Adam reads each gradient and the optimizer state
// and writes the state and the weights back, once each (a fused kernel: Megatron-LM's
// Adam is one multi-tensor pass), gradients + 2 x optimizer + weights bytes per parameter
// (BF16 4 + 24 + 2 = 30); a distributed optimizer updates 1/dp of them on each rank.
double optimizer_step_bytes(const ModelSpec& m, double params, int dp);

// Seconds of one GEMM of `batch` independent products, each (rows x depth) times (depth x
// cols), on one GPU: the larger of its math time and its memory time (NVIDIA 2023, "Matrix
// Multiplication Background", section 2: math-limited above the GPU's ops:byte ratio).
// Math runs at peak on the output padded to whole 256 x 128 tiles (section 3.1, tile
// quantization; 256 x 128 the largest cuBLAS tile of section 2.3), over waves of `sms`
// tiles whose last is on average half full: efficiency w / (w + 1/2) for w = tiles / sms
// waves (section 3.2, wave quantization). Memory moves both inputs and the output once.
double gemm_seconds(const GpuSpec& g, double element_bytes, double rows, double cols, double depth, double batch = 1);

// Seconds of one transformer layer for one micro-batch on one GPU of a tp group, by its
// GEMMs (gemm_seconds): the forward pass, and the backward pass with its recomputation.
struct LayerSeconds {
  double forward = 0, backward = 0;
};
LayerSeconds layer_seconds(const ModelSpec& m, int tp, int64_t micro_batch, int cp = 1);
// The same for the attention core alone (Q K^T and attention over V): with context
// parallelism a GPU's s / cp queries against all s keys.
LayerSeconds core_seconds(const ModelSpec& m, int tp, int64_t micro_batch, int cp = 1);

// Activation bytes one transformer layer keeps for one micro-batch on one GPU.
// With context parallelism `cp`, a GPU's share: s / cp of each sequence's tokens.
double layer_activation_bytes(const ModelSpec& m, int tp, int64_t micro_batch, Recompute r, int cp = 1);

struct MemoryEstimate {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;  // bytes per GPU
  int stage = 0;                                                      // the stage it is for
  double total() const { return weights + gradients + optimizer + activations; }
};
// One GPU of stage `stage`.
MemoryEstimate stage_memory(const ModelSpec& m, const ParallelConfig& c, int stage);
// The stage that needs the most: the first, the second or the last (the stages between hold
// no more layers and no more micro-batches than the second, which with the even split holds
// no more than the first).
MemoryEstimate estimate_memory(const ModelSpec& m, const ParallelConfig& c);

// FLOPs of one training step (the global batch), recomputation included.
double flops_per_step(const ModelSpec& m, int tp = 1);

struct StepEstimate {
  // Seconds: the slowest stage's compute (GEMMs and memory-bound operations), its
  // tensor-parallel, exposed context-parallel and exposed pipeline communication over the m
  // micro-batches, the pipeline bubble ((pp - 1) / v more of its slots), and the exposed
  // gradient all-reduces.
  double compute = 0, tp_comm = 0, cp_comm = 0, pp_comm = 0, bubble = 0, dp_comm = 0;
  // Seconds of the optimizer step after the gradients are reduced: memory-bound
  // (optimizer_step_bytes at the GPU's memory bandwidth), on the stage with the most.
  double optimizer = 0;
  double flops = 0;  // flops_per_step
  // Seconds of gradient reduction run during the backward pass (overlap_grad_reduce) and of
  // weight all-gather run during the forward pass (overlap_param_gather), not part of
  // total(); dp_comm is what is left exposed.
  double dp_comm_hidden = 0;
  double total() const { return compute + tp_comm + cp_comm + pp_comm + bubble + dp_comm + optimizer; }
};
StepEstimate estimate_step(const ModelSpec& m, const ParallelConfig& c);

}  // namespace ptcfs::planner
