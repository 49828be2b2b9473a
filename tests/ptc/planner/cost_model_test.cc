// The cost model against hand-computed values and published formulas (each test names its
// source).
#include "ptc/planner/cost_model.h"
#include "ptc/planner/planner.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

#include "model_fixtures.h"

using namespace ptcfs;
using namespace ptcfs::planner;
using ptcfs::planner::testing::gpt;
using ptcfs::planner::testing::small_model;

TEST_CASE("parameters: Narayanan et al. 2021's formula plus the final LayerNorm, for every model of their Table 1",
          "[cost_model]") {
  // Narayanan et al. 2021, section 5.1: P = 12 l h^2 (1 + 13/12h + (V + s)/12lh), i.e.
  // 12 l h^2 + 13 l h + (V + s) h, with V = 51,200 and s = 2,048; Table 1 gives P in
  // billions, rounded to 0.1.
  struct Row {
    double billions;
    int64_t heads, hidden, layers;
  };
  const Row table1[] = {{1.7, 24, 2304, 24},      {3.6, 32, 3072, 30},     {7.5, 32, 4096, 36},
                        {18.4, 48, 6144, 40},     {39.1, 64, 8192, 48},    {76.1, 80, 10240, 60},
                        {145.6, 96, 12288, 80},   {310.1, 128, 16384, 96}, {529.6, 128, 20480, 105},
                        {1008.0, 160, 25600, 128}};
  for (const Row& r : table1) {
    INFO("hidden " << r.hidden);
    const ModelSpec m = gpt(r.layers, r.hidden, r.heads, 1536);
    const int64_t l = r.layers, h = r.hidden, V = 51200, s = 2048;
    const int64_t narayanan = 12 * l * h * h + 13 * l * h + (V + s) * h;
    CHECK(model_params(m) == narayanan + 2 * h);
    CHECK(std::round(static_cast<double>(model_params(m)) / 1e8) / 10 == r.billions);
  }
  // GPT-3 175B (96 layers, hidden 12288), by hand.
  CHECK(model_params(gpt(96, 12288, 96, 1536)) == 174615846912);
}

TEST_CASE("the vocabulary is padded to a multiple of 128 x tp, as Megatron pads it", "[cost_model]") {
  ModelSpec m = small_model();
  m.vocab = 50257;
  CHECK(padded_vocab(m, 1) == 50304);
  CHECK(padded_vocab(m, 2) == 50432);
  CHECK(padded_vocab(m, 8) == 51200);
  m.vocab = 51200;
  CHECK(padded_vocab(m, 8) == 51200);
}

TEST_CASE("stages take contiguous layers, earlier stages the remainder", "[cost_model]") {
  ModelSpec m = small_model();
  m.layers = 105;
  CHECK(stage_layers(m, 35, 0) == 3);
  m.layers = 10;
  CHECK(stage_layers(m, 4, 0) == 3);
  CHECK(stage_layers(m, 4, 1) == 3);
  CHECK(stage_layers(m, 4, 2) == 2);
  CHECK(stage_layers(m, 4, 3) == 2);
  CHECK(stage_layers(m, 1, 0) == 10);
}

TEST_CASE("the embedding-and-loss split: the first and last stages give one slot each to the embedding and the loss",
          "[cost_model]") {
  // Megatron-LM's --account-for-embedding-in-pipeline-split and
  // --account-for-loss-in-pipeline-split: l + 2 slots over pp stages. BLOOM: 70 layers over
  // 12 stages, 5 on the first and last and 6 between (BigScience's tr11-176B-ml README);
  // Llama 3 405B: 126 over 16, 7 and 8.
  ModelSpec m = small_model();
  m.pipeline_split = PipelineSplit::kEmbeddingAndLoss;
  m.layers = 70;
  CHECK(pipeline_slots(m) == 72);
  CHECK(stage_layers(m, 12, 0) == 5);
  for (int stage = 1; stage < 11; ++stage) CHECK(stage_layers(m, 12, stage) == 6);
  CHECK(stage_layers(m, 12, 11) == 5);
  m.layers = 126;
  CHECK(stage_layers(m, 16, 0) == 7);
  CHECK(stage_layers(m, 16, 8) == 8);
  CHECK(stage_layers(m, 16, 15) == 7);
  // One stage holds every layer; two share the layers evenly, each giving one slot away.
  CHECK(stage_layers(m, 1, 0) == 126);
  CHECK(stage_layers(m, 2, 0) == 63);
  CHECK(stage_layers(m, 2, 1) == 63);
}

TEST_CASE("with the embedding-and-loss split the second stage can set the pace and need the most memory",
          "[cost_model]") {
  // small_model (4 layers) over 3 stages: 6 slots, 1, 2 and 1 layers. Stage 1's two layers
  // take longer per micro-batch than the last stage's layer and logits, and it keeps 2
  // micro-batches of 2 layers where stage 0 keeps 3 of 1.
  ModelSpec m = small_model();
  m.pipeline_split = PipelineSplit::kEmbeddingAndLoss;
  const ParallelConfig c{1, 3, 1, 1};
  const LayerSeconds layer = layer_seconds(m, 1, 1);
  const double logits =
      gemm_seconds(m.gpu, 2, 32, 256, 64) + gemm_seconds(m.gpu, 2, 32, 64, 256) + gemm_seconds(m.gpu, 2, 64, 256, 32);
  REQUIRE(logits < layer.forward + layer.backward);
  const StepEstimate s = estimate_step(m, c);
  CHECK(s.compute == Approx(8 * 2 * (layer.forward + layer.backward)).epsilon(1e-12));
  const MemoryEstimate mem = estimate_memory(m, c);
  CHECK(mem.stage == 1);
  CHECK(mem.activations == Approx(2 * 2 * layer_activation_bytes(m, 1, 1, Recompute::kNone)).epsilon(1e-12));
  // With the even split (2, 1, 1 layers) the first stage is the fullest and the slowest.
  m.pipeline_split = PipelineSplit::kEven;
  CHECK(estimate_memory(m, c).stage == 0);
  CHECK(estimate_step(m, c).compute == Approx(8 * 2 * (layer.forward + layer.backward)).epsilon(1e-12));
}

TEST_CASE(
    "a GPU's parameters: split weights over tp, LayerNorms and row-parallel biases on every rank, tied "
    "embeddings on the first and last stage",
    "[cost_model]") {
  // GPT-3 175B, tp=8, pp=8: 12 layers per stage. Per layer 12 h^2 + 13 h, of which 6 h are
  // on every rank: (12 h^2 + 7 h) / 8 + 6 h = 226,576,896 with h = 12,288.
  const ModelSpec m = gpt(96, 12288, 96, 1536);
  const ParallelConfig c{8, 8, 24, 1};
  CHECK(layer_params(m) == 12 * 12288LL * 12288 + 13 * 12288);
  CHECK(gpu_params(m, c, 0) == 12 * 226576896LL + 51200 / 8 * 12288 + 2048 * 12288);
  CHECK(gpu_params(m, c, 3) == 12 * 226576896LL);
  CHECK(gpu_params(m, c, 7) == 12 * 226576896LL + 51200 / 8 * 12288 + 2 * 12288);
  // One stage holds everything once.
  CHECK(gpu_params(m, {1, 1, 1, 1}, 0) == model_params(m));
}

TEST_CASE("bytes per parameter: Megatron-LM's distributed-optimizer table", "[cost_model]") {
  // docs/source/api-guide/distrib_optimizer.md: 18 / 6 + 12/d (BF16 params, FP32 grads),
  // 20 / 4 + 16/d (FP16), 16 / 8 + 8/d (FP32).
  ModelSpec m = small_model();
  const ParallelConfig c{1, 1, 4, 1};
  const double p = static_cast<double>(gpu_params(m, c, 0));
  const auto per_param = [&](Precision d, bool distributed) {
    m.dtype = d;
    m.distributed_optimizer = distributed;
    const MemoryEstimate e = stage_memory(m, c, 0);
    return (e.weights + e.gradients + e.optimizer) / p;
  };
  CHECK(per_param(Precision::kBF16, false) == 18);
  CHECK(per_param(Precision::kBF16, true) == 6 + 12.0 / 4);
  CHECK(per_param(Precision::kF16, false) == 20);
  CHECK(per_param(Precision::kF16, true) == 4 + 16.0 / 4);
  CHECK(per_param(Precision::kF32, false) == 16);
  CHECK(per_param(Precision::kF32, true) == 8 + 8.0 / 4);
}

TEST_CASE("activations of one layer: every row of Korthikanti et al. 2022, Table 2", "[cost_model]") {
  // s = 2048, b = 1, h = 12288, a = 96, t = 8: 5as/h = 80, sbh = 25,165,824.
  ModelSpec m = gpt(96, 12288, 96, 1536);
  const double sbh = 2048.0 * 12288;
  m.sequence_parallel = false;
  CHECK(layer_activation_bytes(m, 1, 1, Recompute::kNone) == sbh * (34 + 80));           // no parallelism
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kNone) == sbh * (10 + 24 / 8 + 10));  // tensor parallel
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kSelective) == sbh * (10 + 24 / 8));  // tp + selective
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kFull) == sbh * 2);                   // full recompute
  m.sequence_parallel = true;
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kNone) == sbh * (34.0 / 8 + 10));  // tp + sequence parallel
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kSelective) == sbh * 34 / 8);      // tp + sp + selective
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kFull) == sbh * 2 / 8);
  // Linear in the micro-batch.
  CHECK(layer_activation_bytes(m, 8, 4, Recompute::kNone) == 4 * sbh * (34.0 / 8 + 10));
}

TEST_CASE("activations of one layer with grouped-query attention and a narrow MLP, by hand", "[cost_model]") {
  // s = 4, b = 2, h = 8, a = 4, 2 query groups (K and V of width 4), ffn = 24, tp = 2, no
  // sequence parallelism. sbh = 64, s b kv = 32, s b f = 192, a s^2 b = 128.
  ModelSpec m = small_model();
  m.seq = 4;
  m.hidden = 8;
  m.heads = 4;
  m.query_groups = 2;
  m.ffn = 24;
  m.sequence_parallel = false;
  // 16-bit: outside 10 x 64; inside 2 (2 x 64 + 2 x 32 + 2 x 192) = 1152; core 5 x 128.
  CHECK(layer_activation_bytes(m, 2, 2, Recompute::kNone) == 640 + (1152 + 640) / 2);
  // F32: outside (4 x 4 + 2) x 64 = 1152; inside 4 x 576 = 2304; core 9 x 128 = 1152.
  m.dtype = Precision::kF32;
  CHECK(layer_activation_bytes(m, 2, 2, Recompute::kNone) == 1152 + (2304 + 1152) / 2);
}

TEST_CASE("first-stage activations equal Megatron-LM's theoretical_memory_usage (sequence parallel, selective)",
          "[cost_model]") {
  // megatron/training/theoretical_memory_usage.py, compute_activation_memory:
  //   (s b h (18 + 4 ffn/h) L + 8 s b pp + s b h pp) x min(1, m/pp) / t, plus
  //   4 s b h (1 + V/h) / t when pp = 1.
  // Its 8 s b pp term counts the int64 token ids, which this model leaves out.
  ModelSpec m = gpt(96, 12288, 96, 1536);
  m.recompute = Recompute::kSelective;
  m.sequence_parallel = true;
  const double s = 2048, h = 12288, ffn = 4 * h;
  const auto megatron = [&](double L, double b, double t, double pp, double V) {
    double a = s * b * h * (18 + 4 * ffn / h) * L + s * b * h * pp;  // token ids left out
    if (pp == 1) a += 4 * s * b * h * (1 + V / h);
    return a / t;
  };
  CHECK(stage_memory(m, {8, 8, 24, 1}, 0).activations == megatron(96, 1, 8, 8, 51200));
  CHECK(stage_memory(m, {8, 8, 24, 1}, 0).activations == 10292822016.0);  // 409 s b h, by hand
  CHECK(stage_memory(m, {8, 8, 12, 2}, 0).activations == megatron(96, 2, 8, 8, 51200));
  CHECK(stage_memory(m, {8, 4, 48, 1}, 0).activations == megatron(96, 1, 8, 4, 51200));
  m.layers = 8;  // one stage: the formula's output-layer term applies
  CHECK(stage_memory(m, {8, 1, 1, 1}, 0).activations == megatron(8, 1, 8, 1, 51200));
}

TEST_CASE("memory of a small configuration, by hand: weights, gradients, Adam state, activations per stage",
          "[cost_model]") {
  // small_model: 4 layers, h = 64, a = 4, ffn = 256, V = 256, s = 32, B = 8, BF16, no
  // recompute, sequence parallel. tp=2, pp=2, dp=2, b=1: m = 4 micro-batches.
  // Per layer per GPU: (49,984 - 384) / 2 + 384 = 25,184 parameters.
  // Stage 0: 2 layers + word (256 / 2 x 64) + position (32 x 64) = 60,608.
  // Stage 1: 2 layers + final LayerNorm (128) + tied word embeddings = 58,688.
  // One layer's activations (b = 1, t = 2, sp): 10 x 2048 / 2 + (2 (4096 + 4096 + 16384) +
  // 5 x 4 x 32 x 32) / 2 = 45,056 bytes.
  const ModelSpec m = small_model();
  const ParallelConfig c{2, 2, 2, 1};
  CHECK(layer_params(m) == 49984);
  CHECK(gpu_params(m, c, 0) == 60608);
  CHECK(gpu_params(m, c, 1) == 58688);
  CHECK(layer_activation_bytes(m, 2, 1, Recompute::kNone) == 45056);

  const MemoryEstimate first = stage_memory(m, c, 0);
  CHECK(first.weights == 60608 * 2);
  CHECK(first.gradients == 60608 * 4);
  CHECK(first.optimizer == 60608 * 12);
  // 2 micro-batches in flight x 2 layers + the embedding's dropout mask (s b h / t each).
  CHECK(first.activations == 2 * 2 * 45056 + 2 * 2048 / 2);
  const MemoryEstimate last = stage_memory(m, c, 1);
  // 1 micro-batch in flight + final LayerNorm and output layer inputs (2 x 2 s b h / t) +
  // FP32 logits (4 s b V / t).
  CHECK(last.activations == 2 * 45056 + 2 * 2 * 2048 / 2 + 4 * 32 * 256 / 2);
  CHECK(last.total() == 58688 * 18 + 110592);

  const MemoryEstimate worst = estimate_memory(m, c);
  CHECK(worst.stage == 0);
  CHECK(worst.total() == 1273216);

  // Fewer micro-batches than stages: only that many are in flight.
  ModelSpec few = m;
  few.global_batch = 2;
  CHECK(stage_memory(few, {2, 2, 2, 1}, 0).activations == 1 * 2 * 45056 + 1 * 2048 / 2);
  // Full recomputation keeps each layer's input and rebuilds one layer at a time.
  ModelSpec full = m;
  full.recompute = Recompute::kFull;
  CHECK(stage_memory(full, c, 0).activations == 2 * 2 * (2 * 2048 / 2) + 45056 + 2 * 2048 / 2);
  // Interleaved, v = 2: 1 + (pp - 1) / (pp v) = 5/4 times the micro-batches in flight
  // (Korthikanti et al. 2022, section 4.2.3), embedding mask included.
  CHECK(stage_memory(m, {2, 2, 2, 1, 2}, 0).activations == 2.5 * 2 * 45056 + 2.5 * 2048 / 2);
}

TEST_CASE("without dropout no mask is kept or written, and the attention core keeps its softmax output once",
          "[cost_model]") {
  // Korthikanti et al. 2022, Table 2's rows less the masks: outside 10 s b h less the two
  // 1-byte masks (8), the core 5 a s^2 b less mask and dropout output (2 a s^2 b, here 2 x 16
  // s b h with a s / h = 16).
  ModelSpec m = gpt(96, 12288, 96, 1536);
  m.dropout = false;
  const double sbh = 2048.0 * 12288;
  m.sequence_parallel = false;
  CHECK(layer_activation_bytes(m, 1, 1, Recompute::kNone) == sbh * (8 + 24 + 32));
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kNone) == sbh * (8 + 24 / 8 + 32.0 / 8));
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kSelective) == sbh * (8 + 24 / 8));
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kFull) == sbh * 2);
  m.sequence_parallel = true;
  CHECK(layer_activation_bytes(m, 8, 1, Recompute::kNone) == sbh * (8 + 24 + 32) / 8);

  // small_model, tp = 2, pp = 2, dp = 2, b = 1, sequence parallel (the by-hand case above):
  // a layer keeps 8 x 2048 / 2 + 24,576 + 2 x 4,096 / 2 = 36,864 bytes instead of 45,056,
  // and the first stage no embedding mask.
  ModelSpec small = small_model();
  const ModelSpec with = small;
  small.dropout = false;
  CHECK(layer_activation_bytes(small, 2, 1, Recompute::kNone) == 36864);
  CHECK(stage_memory(small, {2, 2, 2, 1}, 0).activations == 2 * 2 * 36864);
  // Time: each layer's forward moves the two masks (2 x 2048 / 2 bytes) and the core's
  // dropout (read, write, mask: 5 a s^2 b / t = 10,240 bytes) less; the backward twice that.
  CHECK(layer_seconds(small, 2, 1).forward ==
        Approx(layer_seconds(with, 2, 1).forward - (2048 + 10240) / 2039e9).epsilon(1e-12));
  CHECK(layer_seconds(small, 2, 1).backward ==
        Approx(layer_seconds(with, 2, 1).backward - 2 * (2048 + 10240) / 2039e9).epsilon(1e-12));
  // With FlashAttention only the masks are left to drop.
  small.flash_attention = true;
  ModelSpec flash = with;
  flash.flash_attention = true;
  CHECK(layer_activation_bytes(flash, 2, 1, Recompute::kNone) - layer_activation_bytes(small, 2, 1, Recompute::kNone) ==
        2 * 2048 / 2);
}

TEST_CASE("FlashAttention keeps no s x s tensor, moves none, and computes Q K^T again in the backward pass",
          "[cost_model]") {
  // small_model, tp = 2, b = 1: the core's 5 a s^2 b = 20,480 bytes give way to the softmax
  // statistics, 4 a s b = 512 bytes, split over tp.
  ModelSpec m = small_model();
  const ModelSpec plain = m;
  m.flash_attention = true;
  CHECK(layer_activation_bytes(plain, 2, 1, Recompute::kNone) - layer_activation_bytes(m, 2, 1, Recompute::kNone) ==
        (20480 - 512) / 2);
  // Selective recomputation has nothing more to drop.
  CHECK(layer_activation_bytes(m, 2, 1, Recompute::kSelective) == layer_activation_bytes(m, 2, 1, Recompute::kNone));
  // Time: the softmax and dropout traffic (9 a s^2 b / t = 18,432 bytes forward, twice that
  // backward) goes; the backward pass runs Q K^T (2 heads per GPU, 32 x 32 over 16) again.
  const double scores = gemm_seconds(m.gpu, 2, 32, 32, 16, 2);
  CHECK(layer_seconds(m, 2, 1).forward == Approx(layer_seconds(plain, 2, 1).forward - 18432 / 2039e9).epsilon(1e-12));
  CHECK(layer_seconds(m, 2, 1).backward ==
        Approx(layer_seconds(plain, 2, 1).backward - 2 * 18432 / 2039e9 + scores).epsilon(1e-12));
  // With selective recomputation the core is not run a second time before the backward.
  m.recompute = Recompute::kSelective;
  ModelSpec none = m;
  none.recompute = Recompute::kNone;
  CHECK(layer_seconds(m, 2, 1).backward == layer_seconds(none, 2, 1).backward);
}

TEST_CASE("a SwiGLU MLP and an untied output layer, by hand", "[cost_model]") {
  // small_model with SwiGLU: W1, W3 h x f and W2 f x h with biases: 3 h f + 2 f + h =
  // 49,152 + 512 + 64 in place of 2 h f + f + h = 32,768 + 256 + 64.
  ModelSpec m = small_model();
  m.mlp = Mlp::kSwiglu;
  CHECK(layer_params(m) == 49984 + 16384 + 256);
  // Forward FLOPs per layer and sequence grow by 2 s h f = 1,048,576 (times 3 in training,
  // 4 layers, 8 sequences).
  ModelSpec gelu = small_model();
  CHECK(flops_per_step(m) - flops_per_step(gelu) == 3.0 * 4 * 8 * 1048576);
  // Activations keep both input products' outputs and the gate's: 3 s b f, not 2 s b f
  // (e = 2, t = 2): 2 x 8192 / 2 more bytes.
  CHECK(layer_activation_bytes(m, 2, 1, Recompute::kNone) == 45056 + 8192);
  // Untied: the output layer (V h = 16,384) is a second copy, on the last stage whatever
  // pp, and needs no gradient all-reduce with the first stage.
  ModelSpec untied = small_model();
  untied.tied_embeddings = false;
  CHECK(model_params(untied) == model_params(gelu) + 256 * 64);
  CHECK(gpu_params(untied, {2, 1, 4, 1}, 0) == gpu_params(gelu, {2, 1, 4, 1}, 0) + 256 / 2 * 64);
  CHECK(gpu_params(untied, {2, 2, 2, 1}, 1) == gpu_params(gelu, {2, 2, 2, 1}, 1));
  untied.overlap_grad_reduce = false;
  gelu.overlap_grad_reduce = false;
  gelu.gpu.intra_node_gbps = untied.gpu.intra_node_gbps = 8;
  gelu.gpu.inter_node_gbps = untied.gpu.inter_node_gbps = 0.8;
  // small_model has 4 GPUs per node: stage 0 pairs (0, 2), (1, 3) inside a node; the tied
  // copy's sync crosses nodes: 2 x 1/2 x 4 x 8,192 B at 1e8 B/s.
  CHECK(estimate_step(gelu, {2, 2, 2, 1}).dp_comm - estimate_step(untied, {2, 2, 2, 1}).dp_comm ==
        Approx(32768 / 1e8).epsilon(1e-9));
}

TEST_CASE("FLOPs per step: Narayanan et al. 2021, eq. 3, and its form without recomputation", "[cost_model]") {
  // 96 B s l h^2 (1 + s/6h + V/16lh) with full recomputation: 96 B s l h^2 + 16 B s^2 l h +
  // 6 B s h V exactly. Without it the layers run three passes, not four:
  // 72 B s l h^2 + 12 B s^2 l h + 6 B s h V.
  ModelSpec m = small_model();  // l = 4, h = 64, s = 32, V = 256, B = 8
  const int64_t B = 8, s = 32, l = 4, h = 64, V = 256;
  m.recompute = Recompute::kFull;
  CHECK(flops_per_step(m) == static_cast<double>(96 * B * s * l * h * h + 16 * B * s * s * l * h + 6 * B * s * h * V));
  m.recompute = Recompute::kNone;
  CHECK(flops_per_step(m) == static_cast<double>(72 * B * s * l * h * h + 12 * B * s * s * l * h + 6 * B * s * h * V));
  // Selective recomputation repeats Q K^T and attention over V: 4 B s^2 h per layer.
  m.recompute = Recompute::kSelective;
  CHECK(flops_per_step(m) == static_cast<double>(72 * B * s * l * h * h + 16 * B * s * s * l * h + 6 * B * s * h * V));

  // GPT-3 175B, B = 1536, in the paper's own form.
  ModelSpec big = gpt(96, 12288, 96, 1536);
  big.recompute = Recompute::kFull;
  const double Bd = 1536, sd = 2048, ld = 96, hd = 12288, Vd = 51200;
  CHECK(flops_per_step(big) ==
        Approx(96 * Bd * sd * ld * hd * hd * (1 + sd / (6 * hd) + Vd / (16 * ld * hd))).epsilon(1e-12));
}

TEST_CASE("a GEMM's time: tiles of 256 x 128, waves of one tile per SM, the larger of math and memory",
          "[cost_model]") {
  // 1 TFLOP/s, 4 SMs, 1,000 GB/s. 512 x 256 over 1,024: 2 x 2 tiles = 1 wave, efficiency
  // 1 / (1 + 1/2): 2 x 512 x 256 x 1,024 / 1e12 x 1.5 s; memory 2 (512 x 1,024 + 1,024 x
  // 256 + 512 x 256) / 1e12 s is less.
  GpuSpec g{80, 1, 8, 100, 100, 4, 1000};
  CHECK(gemm_seconds(g, 2, 512, 256, 1024) == Approx(268435456e-12 * 1.5).epsilon(1e-12));
  // 300 rows still take two row tiles (tile quantization).
  CHECK(gemm_seconds(g, 2, 300, 256, 1024) == Approx(268435456e-12 * 1.5).epsilon(1e-12));
  // 4 of them: 16 tiles, 4 waves, efficiency 4 / 4.5.
  CHECK(gemm_seconds(g, 2, 512, 256, 1024, 4) == Approx(4 * 268435456e-12 * 1.125).epsilon(1e-12));
  // Depth 1 at 1 GB/s is memory-bound: 2 (256 + 128 + 256 x 128) bytes.
  g.memory_bandwidth_gbs = 1;
  CHECK(gemm_seconds(g, 2, 256, 128, 1) == Approx(2 * (256 + 128 + 32768) / 1e9).epsilon(1e-12));
  // Larger products are more efficient: a micro-batch of 8 beats 8 of 1.
  g.memory_bandwidth_gbs = 2039;
  g.sms = 108;
  CHECK(gemm_seconds(g, 2, 8 * 2048, 768, 2304) < 8 * gemm_seconds(g, 2, 2048, 768, 2304));
}

TEST_CASE("a layer's time is its GEMMs: four linear layers and the attention core", "[cost_model]") {
  // small_model at tp = 2, b = 2: T = 64 tokens, h = 64, kv = 64, f = 256, 4 heads of 16.
  ModelSpec m = small_model();
  const GpuSpec& g = m.gpu;
  const auto linear = [&](double in, double out) {
    return std::pair{gemm_seconds(g, 2, 64, out, in),
                     gemm_seconds(g, 2, 64, in, out) + gemm_seconds(g, 2, in, out, 64)};
  };
  const auto [qkv_f, qkv_b] = linear(64, 192 / 2);
  const auto [proj_f, proj_b] = linear(64 / 2, 64);
  const auto [up_f, up_b] = linear(64, 256 / 2);
  const auto [down_f, down_b] = linear(256 / 2, 64);
  // 2 sequences x 2 heads per GPU: Q K^T 32 x 32 over 16, P V 32 x 16 over 32.
  const double scores = gemm_seconds(g, 2, 32, 32, 16, 4), values = gemm_seconds(g, 2, 32, 16, 32, 4);
  // Memory-bound operations, forward (bytes at 2,039 GB/s; s b = 64, sequence parallel):
  // outside (10 x 2 + 2) s b h / 2 = 45,056; inside (2 x 2 s b f + 9 a s^2 b) / 2 =
  // (65,536 + 73,728) / 2 = 69,632. The backward pass moves twice as much.
  const double elementwise = (45056 + 69632) / 2039e9;
  const double forward = qkv_f + proj_f + up_f + down_f + scores + values + elementwise;
  const double backward = qkv_b + proj_b + up_b + down_b + scores + 3 * values + 2 * elementwise;
  CHECK(layer_seconds(m, 2, 2).forward == Approx(forward).epsilon(1e-12));
  CHECK(layer_seconds(m, 2, 2).backward == Approx(backward).epsilon(1e-12));
  m.recompute = Recompute::kFull;
  CHECK(layer_seconds(m, 2, 2).backward == Approx(backward + forward).epsilon(1e-12));
  m.recompute = Recompute::kSelective;
  // Selective: the core's GEMMs and its softmax and dropout (73,728 / 2 bytes).
  CHECK(layer_seconds(m, 2, 2).backward == Approx(backward + scores + values + 36864 / 2039e9).epsilon(1e-12));
  // SwiGLU: one GEMM for both input products, 2f / t wide; its activation reads 2 s b f.
  m.recompute = Recompute::kNone;
  m.mlp = Mlp::kSwiglu;
  const auto [gate_f, gate_b] = linear(64, 2 * 256 / 2);
  CHECK(layer_seconds(m, 2, 2).forward == Approx(forward - up_f + gate_f + 32768 / 2 / 2039e9).epsilon(1e-12));
}

TEST_CASE("step time of a small configuration, by hand", "[cost_model]") {
  // small_model on 8 GPUs, 4 per node, 8 Gbit/s inside a node, 0.8 across: tp=2, pp=2,
  // dp=2, b=1: m = 4 micro-batches of 1 sequence.
  //   compute per micro-batch on the last stage (the slower): 2 layers + the logits (64 in,
  //     256 / 2 out);
  //   tp all-reduce of s h x 2 bytes = 4096 B over 2 ranks: 4096 B / 1e9 B/s; 4 per layer,
  //     2 layers: 3.2768e-5 s.
  //   pp: the job spans two nodes: 2 x 4096 / 2 B / 1e8 B/s = 4.096e-5 s.
  // dp: each DP pair is inside a node; stage 0 has the most parameters (60,608): 4-byte
  //   gradients, ring over 2: 242,432 B / 1e9 B/s. Tied embeddings (8192 parameters),
  //   first to last stage across nodes: 32,768 B / 1e8 B/s.
  ModelSpec m = small_model();
  m.gpu.per_node = 4;
  m.gpu.intra_node_gbps = 8;
  m.gpu.inter_node_gbps = 0.8;
  m.overlap_grad_reduce = false;
  const LayerSeconds layer = layer_seconds(m, 2, 1);
  const double logits_f = gemm_seconds(m.gpu, 2, 32, 128, 64);
  const double logits_b = gemm_seconds(m.gpu, 2, 32, 64, 128) + gemm_seconds(m.gpu, 2, 64, 128, 32);
  const double compute = 2 * (layer.forward + layer.backward) + logits_f + logits_b;
  const double slot = compute + 3.2768e-5 + 4.096e-5;
  const StepEstimate s = estimate_step(m, {2, 2, 2, 1});
  CHECK(s.compute == Approx(4 * compute).epsilon(1e-12));
  CHECK(s.tp_comm == Approx(4 * 3.2768e-5).epsilon(1e-12));
  CHECK(s.pp_comm == Approx(4 * 4.096e-5).epsilon(1e-12));
  CHECK(s.bubble == Approx(slot).epsilon(1e-12));
  CHECK(s.dp_comm == Approx(2.42432e-4 + 3.2768e-4).epsilon(1e-12));
  CHECK(s.dp_comm_hidden == 0);
  // The optimizer step of stage 0 (the most parameters): BF16, 4 + 2 x 12 + 2 = 30 bytes per
  // parameter at 2,039 GB/s.
  CHECK(s.optimizer == Approx(60608.0 * 30 / 2.039e12).epsilon(1e-12));
  CHECK(s.total() == Approx(s.compute + s.tp_comm + s.pp_comm + s.bubble + s.dp_comm + s.optimizer).epsilon(1e-12));
  CHECK(s.flops == flops_per_step(m, 2));

  // On one node of 8 the pipeline sends and the embedding sync stay inside it.
  m.gpu.per_node = 8;
  const StepEstimate one_node = estimate_step(m, {2, 2, 2, 1});
  CHECK(one_node.pp_comm == Approx(4 * 4.096e-6).epsilon(1e-12));
  CHECK(one_node.dp_comm == Approx(2.42432e-4 + 3.2768e-5).epsilon(1e-12));

  // With 2 GPUs per node each DP pair (ranks t, t + 2) spans two nodes.
  m.gpu.per_node = 2;
  CHECK(estimate_step(m, {2, 2, 2, 1}).dp_comm == Approx(2.42432e-3 + 3.2768e-4).epsilon(1e-12));

  // Overlapped, the gradient reduction of each stage runs during the last micro-batch's
  // backward pass: stage 0 (the larger reduction) hides 2 layers' backward.
  m.gpu.per_node = 4;
  m.overlap_grad_reduce = true;
  const StepEstimate overlapped = estimate_step(m, {2, 2, 2, 1});
  const double hidden = std::min(2.42432e-4, 2 * layer.backward);
  CHECK(overlapped.dp_comm == Approx(2.42432e-4 - hidden + 3.2768e-4).epsilon(1e-12));
  CHECK(overlapped.dp_comm_hidden == Approx(hidden).epsilon(1e-12));
  CHECK(overlapped.total() < s.total());

  // Interleaved, v = 2: twice the sends (not overlapped when overlap_p2p_comm is off), half
  // the bubble.
  m.overlap_grad_reduce = false;
  m.overlap_p2p_comm = false;
  const StepEstimate v2 = estimate_step(m, {2, 2, 2, 1, 2});
  CHECK(v2.pp_comm == Approx(4 * 2 * 4.096e-5).epsilon(1e-12));
  CHECK(v2.bubble == Approx((compute + 3.2768e-5 + 2 * 4.096e-5) / 2).epsilon(1e-12));
  // With overlap_p2p_comm the sends hide behind the other chunks' compute: only what
  // exceeds the compute is left (on one node of 8 they take 2 x 4.096e-6 s, less).
  m.overlap_p2p_comm = true;
  REQUIRE(2 * 4.096e-5 > compute);
  CHECK(estimate_step(m, {2, 2, 2, 1, 2}).pp_comm > 0);
  m.gpu.per_node = 8;
  REQUIRE(2 * 4.096e-6 < compute - logits_f - logits_b);
  CHECK(estimate_step(m, {2, 2, 2, 1, 2}).pp_comm == 0);
  m.gpu.per_node = 4;
  // The 1F1B schedule's sends are never overlapped.
  CHECK(estimate_step(m, {2, 2, 2, 1}).pp_comm == Approx(4 * 4.096e-5).epsilon(1e-12));
}

TEST_CASE("a distributed optimizer reduce-scatters gradients and all-gathers weights", "[cost_model]") {
  // tp=1, pp=1, dp=4 on one node of 4 at 8 Gbit/s: P = 49,984 x 4 + 256 x 64 + 32 x 64 +
  // 128 = 218,496 parameters. All-reduce: 2 x 3/4 x 4P B; reduce-scatter + all-gather:
  // 3/4 x (4P + 2P) B.
  ModelSpec m = small_model();
  m.gpu.per_node = 4;
  m.gpu.intra_node_gbps = 8;
  m.overlap_grad_reduce = false;
  const double P = 218496;
  CHECK(gpu_params(m, {1, 1, 4, 1}, 0) == 218496);
  CHECK(estimate_step(m, {1, 1, 4, 1}).dp_comm == Approx(2 * 0.75 * 4 * P / 1e9).epsilon(1e-12));
  CHECK(estimate_step(m, {1, 1, 4, 1}).optimizer == Approx(30 * P / 2.039e12).epsilon(1e-12));
  m.distributed_optimizer = true;
  m.overlap_param_gather = false;
  CHECK(estimate_step(m, {1, 1, 4, 1}).dp_comm == Approx(0.75 * 6 * P / 1e9).epsilon(1e-12));
  CHECK(stage_memory(m, {1, 1, 4, 1}, 0).optimizer == P * 12 / 4);
  // Each rank updates a quarter: 30 P / 4 bytes.
  CHECK(estimate_step(m, {1, 1, 4, 1}).optimizer == Approx(30 * P / 4 / 2.039e12).epsilon(1e-12));
  // --overlap-param-gather: the weights' all-gather (3/4 x 2P B) runs during the next step's
  // forward pass of one micro-batch (4 layers and the logits), which hides as much of it, and
  // the reduce-scatter (3/4 x 4P B) during the last backward pass. Megatron-LM takes it only
  // with --overlap-grad-reduce: without, both stay exposed.
  m.overlap_param_gather = true;
  CHECK(estimate_step(m, {1, 1, 4, 1}).dp_comm == Approx(0.75 * 6 * P / 1e9).epsilon(1e-12));
  m.overlap_grad_reduce = true;
  const LayerSeconds layer = layer_seconds(m, 1, 1);
  const double forward = 4 * layer.forward + gemm_seconds(m.gpu, 2, 32, 256, 64);
  const double backward =
      4 * layer.backward + gemm_seconds(m.gpu, 2, 32, 64, 256) + gemm_seconds(m.gpu, 2, 64, 256, 32);
  REQUIRE(forward < 0.75 * 2 * P / 1e9);
  REQUIRE(backward < 0.75 * 4 * P / 1e9);
  const StepEstimate gathered = estimate_step(m, {1, 1, 4, 1});
  CHECK(gathered.dp_comm == Approx(0.75 * 6 * P / 1e9 - forward - backward).epsilon(1e-12));
  CHECK(gathered.dp_comm_hidden == Approx(forward + backward).epsilon(1e-12));
  m.overlap_grad_reduce = false;
  // Without a distributed optimizer there is no gather to overlap.
  m.distributed_optimizer = false;
  CHECK(estimate_step(m, {1, 1, 4, 1}).dp_comm == Approx(2 * 0.75 * 4 * P / 1e9).epsilon(1e-12));
  // BF16 gradients (--grad-reduce-in-bf16): 2 bytes held and reduced per parameter.
  m.grad_reduce_in_bf16 = true;
  CHECK(estimate_step(m, {1, 1, 4, 1}).dp_comm == Approx(2 * 0.75 * 2 * P / 1e9).epsilon(1e-12));
  CHECK(stage_memory(m, {1, 1, 4, 1}, 0).gradients == 2 * P);
}

TEST_CASE("context parallelism: a cp-th of the tokens per GPU, keys and values passed around a ring", "[cost_model]") {
  // small_model (s = 32, h = kv = 64, 4 layers, B = 8) on one node of 4 at 0.08 Gbit/s, tp 1:
  // cp 2 halves every activation of a layer (its 16 tokens, their scores against all 32 keys)
  // and the tokens of each GEMM.
  ModelSpec m = small_model();
  m.context_parallel = true;
  m.gpu.intra_node_gbps = 0.08;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    CHECK(layer_activation_bytes(m, 1, 1, r, 2) == layer_activation_bytes(m, 1, 1, r) / 2);
  const ParallelConfig c{1, 1, 2, 1, 1, 2};
  CHECK(validate_config(m, c).is_ok());
  // The ring: each pass receives the other GPU's K and V, 2 x 2 bytes x 16 tokens x 64 = 4,096 B
  // at 1e7 B/s; forward once, backward twice (K and V again, their gradients back), each less
  // the attention core it runs beside; 4 layers, 4 micro-batches per pipeline.
  const double gather = 4096 / 1e7;
  const LayerSeconds core = core_seconds(m, 1, 1, 2);
  REQUIRE(core.forward < gather);
  REQUIRE(core.backward < 2 * gather);
  const StepEstimate s = estimate_step(m, c);
  CHECK(s.cp_comm == Approx(4 * 4 * (gather - core.forward + 2 * gather - core.backward)).epsilon(1e-12));
  CHECK(s.compute == Approx(4 * 4 * (layer_seconds(m, 1, 1, 2).forward + layer_seconds(m, 1, 1, 2).backward) +
                            4 * (gemm_seconds(m.gpu, 2, 16, 256, 64) + gemm_seconds(m.gpu, 2, 16, 64, 256) +
                                 gemm_seconds(m.gpu, 2, 64, 256, 16)))
                         .epsilon(1e-12));
  CHECK(s.total() ==
        Approx(s.compute + s.tp_comm + s.cp_comm + s.pp_comm + s.bubble + s.dp_comm + s.optimizer).epsilon(1e-12));
  // The gradients are reduced over dp x cp = 4 ranks, the optimizer state sharded over them.
  m.distributed_optimizer = true;
  m.overlap_grad_reduce = false;
  CHECK(stage_memory(m, c, 0).optimizer == stage_memory(m, {1, 1, 4, 1}, 0).optimizer);
  CHECK(estimate_step(m, c).dp_comm == Approx(estimate_step(m, {1, 1, 4, 1}).dp_comm).epsilon(1e-12));
}

TEST_CASE("the optimizer step reads gradients and state and writes state and weights once", "[cost_model]") {
  // gradients + 2 x optimizer + weights bytes per parameter: BF16 4 + 24 + 2 = 30, F16
  // 2 + 32 + 2 = 36, F32 4 + 16 + 4 = 24; a distributed optimizer divides by dp.
  ModelSpec m = small_model();
  CHECK(optimizer_step_bytes(m, 1000, 8) == 30000);
  // BF16 gradients (--grad-reduce-in-bf16): 2 + 24 + 2 = 28.
  m.grad_reduce_in_bf16 = true;
  CHECK(optimizer_step_bytes(m, 1000, 8) == 28000);
  m.grad_reduce_in_bf16 = false;
  m.dtype = Precision::kF16;
  CHECK(optimizer_step_bytes(m, 1000, 8) == 36000);
  m.dtype = Precision::kF32;
  CHECK(optimizer_step_bytes(m, 1000, 8) == 24000);
  m.distributed_optimizer = true;
  CHECK(optimizer_step_bytes(m, 1000, 8) == 3000);
}
