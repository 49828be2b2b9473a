// MODEL.json: the transformer a parallelism plan is made for, and the GPUs it runs on
// (docs/PLANNER.md). Parsed strictly: every member typed and
// bounded, unknown members refused, defaults set here and nowhere else.
//
//   {"layers": 24, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 51200, "seq": 2048,
//    "global_batch": 512,
//    "query_groups": 16, "dtype": "BF16", "distributed_optimizer": false,
//    "recompute": "none", "sequence_parallel": true,
//    "mlp": "gelu", "tied_embeddings": true, "flash_attention": true, "dropout": true,
//    "interleave": true, "pipeline_split": "even", "context_parallel": false,
//    "overlap_grad_reduce": true, "overlap_p2p_comm": true, "overlap_param_gather": true,
//    "grad_reduce_in_bf16": false,
//    "gpu": {"memory_gb": 80, "tflops": 312, "per_node": 8,
//            "intra_node_gbps": 2400, "inter_node_gbps": 200,
//            "sms": 108, "memory_bandwidth_gbs": 2039}}
//
// The model is a GPT-style decoder as Megatron-LM builds it: learned position embeddings,
// biases on every linear layer, two LayerNorms per layer, an MLP of width `ffn` (GeLU, or
// gated SwiGLU with two input projections of width `ffn`), output weights tied to the word
// embeddings unless `tied_embeddings` is false, the vocabulary padded to a multiple of
// 128 x tp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"

namespace ptcfs::planner {

// Which activations the backward pass recomputes instead of keeping (Korthikanti et al.
// 2022): nothing, the attention core (QK^T, softmax, dropout, attention over V), or each
// whole layer from its input.
enum class Recompute { kNone, kSelective, kFull };
const char* recompute_name(Recompute r);

// Training precision, named as ptc.json names dtypes. It sets the bytes per parameter of
// weights, gradients and Adam state (Megatron's distributed-optimizer table) and the bytes
// per activation element.
enum class Precision { kBF16, kF16, kF32 };
const char* precision_name(Precision p);

struct GpuSpec {
  double memory_gb = 0;        // usable memory per GPU, GiB (2^30 bytes)
  double tflops = 0;           // dense peak TFLOP/s per GPU in the model's precision
  int per_node = 0;            // GPUs per node, 1 to kMaxPerNode
  double intra_node_gbps = 0;  // link bandwidth per GPU inside a node, Gbit/s
  double inter_node_gbps = 0;  // link bandwidth per GPU across nodes, Gbit/s
  // For the GEMM efficiency model (cost_model.h, gemm_seconds); an A100 SXM 80 GB unless
  // given: 108 streaming multiprocessors, 2,039 GB/s of HBM2e (NVIDIA A100 datasheet).
  int sms = 108;                       // streaming multiprocessors
  double memory_bandwidth_gbs = 2039;  // device memory bandwidth, GB/s (1e9 bytes)
};

// The MLP: GeLU(x W1) W2 with W1 h x ffn, or SwiGLU (Shazeer 2020; Llama, Touvron et al.
// 2023): (SiLU(x W1) * x W3) W2 with W1, W3 h x ffn.
enum class Mlp { kGelu, kSwiglu };
const char* mlp_name(Mlp m);

// How pipeline stages share the layers. kEven: the transformer layers in contiguous groups,
// as even as possible, earlier stages taking the remainder (ptcfs's own layout,
// docs/FORMATS.md "ptc.json"). kEmbeddingAndLoss: the embedding and the output layer with
// the loss count as one layer each, so the first and last stages hold one transformer layer
// fewer (Megatron-LM's --account-for-embedding-in-pipeline-split and
// --account-for-loss-in-pipeline-split; the Llama 3 and BLOOM runs, docs/PLANNER.md).
enum class PipelineSplit { kEven, kEmbeddingAndLoss };

struct ModelSpec {
  int64_t layers = 0, hidden = 0, heads = 0, ffn = 0, vocab = 0, seq = 0, global_batch = 0;
  int64_t query_groups = 0;  // key/value heads (grouped-query attention); `heads` when absent
  Precision dtype = Precision::kBF16;
  bool distributed_optimizer = false;  // Adam state sharded over data-parallel ranks
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = true;  // Korthikanti et al.'s sequence parallelism alongside tp
  Mlp mlp = Mlp::kGelu;
  bool tied_embeddings = true;  // the output layer shares the word embeddings' weights
  // The attention core as one fused kernel (FlashAttention, Dao et al. 2022): the s x s
  // scores never reach device memory, and the backward pass computes them again.
  bool flash_attention = true;
  // Dropout after attention, after the MLP, on the embeddings and in the attention core (GPT's
  // and Megatron-LM's default); false (Llama-style pretraining, dropout 0): no dropout mask
  // is kept or written, and the attention core keeps its softmax output once.
  bool dropout = true;
  // The planner may choose interleaved (virtual) pipeline stages (Narayanan et al. 2021,
  // section 2.2.2); false: every configuration has virtual_stages 1.
  bool interleave = true;
  PipelineSplit pipeline_split = PipelineSplit::kEven;
  // The planner may choose context parallelism, cp > 1 (Megatron-LM's
  // --context-parallel-size: each sequence's tokens split over cp GPUs, keys and values
  // passed around them in a ring); false: every configuration has cp 1.
  bool context_parallel = false;
  // Megatron-LM's --overlap-grad-reduce: the data-parallel gradient reduction runs during
  // the backward pass; --overlap-p2p-communication: pipeline sends of the interleaved
  // schedule run during compute.
  bool overlap_grad_reduce = true;
  bool overlap_p2p_comm = true;
  // Megatron-LM's --overlap-param-gather: with a distributed optimizer, the all-gather of the
  // updated weights runs during the next step's forward pass instead of after the step.
  bool overlap_param_gather = true;
  // With BF16: gradients accumulated and reduced in BF16 (Megatron-LM's --grad-reduce-in-bf16,
  // NeMo's grad_sync_dtype bf16), 2 bytes per parameter; false: in FP32, as Megatron-LM does
  // by default for BF16. Only with dtype BF16.
  bool grad_reduce_in_bf16 = false;
  GpuSpec gpu;
};

// Parses a MODEL.json document; `where` (the file name) prefixes every error, which names
// the member at fault: "MODEL.json: unknown key 'layer' (allowed: ...)",
// "MODEL.json: heads (24) is not a multiple of query_groups (5)".
// The most GPUs per node MODEL.json (and `--gpus-per-node`) may give.
inline constexpr int64_t kMaxPerNode = 1024;

Result<ModelSpec> parse_model_json(std::string_view text, const std::string& where);
// The same for a parsed object (a job's "model" in JOBS.json).
Result<ModelSpec> parse_model_spec(const nlohmann::json& j, const std::string& where);

}  // namespace ptcfs::planner
