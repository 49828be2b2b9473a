// The planner against configurations published by people who ran them. Where it agrees the
// test says so; where it differs the test pins what it chooses instead and how much slower
// it predicts the published choice to be (docs/PLANNER.md explains why they differ).
#include "ptc/planner/planner.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include "model_fixtures.h"

using namespace ptcfs;
using namespace ptcfs::planner;
using ptcfs::planner::testing::gpt;
using ptcfs::planner::testing::h100;
using ptcfs::planner::testing::llama;
using ptcfs::planner::testing::nemotron4;

namespace {

struct Pick {
  int tp, pp;
};

// The planner's best configuration, and the predicted step time of `published` (which must
// be valid and fit) over the best one's.
std::pair<ParallelConfig, double> compare_at(const ModelSpec& m, int gpus, const ParallelConfig& published) {
  auto plan = plan_parallelism(m, gpus);
  REQUIRE(plan.is_ok());
  REQUIRE(validate_config(m, published).is_ok());
  const Candidate pub = evaluate(m, published);
  REQUIRE(fits(m, pub.memory));
  return {plan->front().config, pub.step_seconds() / plan->front().step_seconds()};
}

// The planner's best configuration, and the predicted step time of the best configuration
// with the published tp and pp (any micro-batch; interleaved, v > 1, when `interleaved` and
// pp > 1: the table gives neither b nor v), which must fit, over the best one's.
std::pair<ParallelConfig, double> compare(const ModelSpec& m, int gpus, int tp, int pp, bool interleaved) {
  auto plan = plan_parallelism(m, gpus);
  REQUIRE(plan.is_ok());
  const auto published = std::find_if(plan->begin(), plan->end(), [&](const Candidate& c) {
    return c.config.tp == tp && c.config.pp == pp && (!interleaved || pp == 1 || c.config.virtual_stages > 1);
  });
  REQUIRE(published != plan->end());
  return {plan->front().config, published->step_seconds() / plan->front().step_seconds()};
}

}  // namespace

TEST_CASE("Megatron-LM's GPT configurations on A100 nodes (Narayanan et al. 2021, Table 1)", "[planner][published]") {
  // Narayanan et al. 2021, Table 1: GPT models with V = 51,200, s = 2,048, trained in mixed
  // precision (FP16) with full activation recomputation and without sequence parallelism
  // (which came a year later), on DGX A100 nodes (model_fixtures.h: gpt()), "using the
  // interleaved pipeline schedule with the scatter/gather optimization" (section 5.1): the
  // published (tp, pp) is evaluated at its best micro-batch and its best v > 1 (pp > 1).
  // Megatron-LM then (April 2021) all-reduced the gradients after the backward pass and
  // synchronised after every pipeline send: both overlaps off (docs/PLANNER.md).
  struct Row {
    double billions;
    int64_t heads, hidden, layers;
    int tp, pp, gpus;
    int64_t batch;
    Pick planner;      // what the planner chooses (equal to tp, pp where it agrees)
    double max_ratio;  // published step time / planner's best, predicted, upper bound
  };
  const Row table1[] = {
      {1.7, 24, 2304, 24, 1, 1, 32, 512, {1, 1}, 1.0},
      {3.6, 32, 3072, 30, 2, 1, 64, 512, {2, 1}, 1.0},
      {7.5, 32, 4096, 36, 4, 1, 128, 512, {2, 2}, 1.027},
      {18.4, 48, 6144, 40, 8, 1, 256, 1024, {2, 4}, 1.146},
      {39.1, 64, 8192, 48, 8, 2, 512, 1536, {2, 8}, 1.101},
      {76.1, 80, 10240, 60, 8, 4, 1024, 1792, {8, 4}, 1.0},
      {145.6, 96, 12288, 80, 8, 8, 1536, 2304, {4, 16}, 1.045},
      {310.1, 128, 16384, 96, 8, 16, 1920, 2160, {8, 12}, 1.004},
      {529.6, 128, 20480, 105, 8, 35, 2520, 2520, {8, 21}, 1.028},
      {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, {8, 64}, 1.0},
  };
  int agree = 0, within_10_percent = 0;
  for (const Row& r : table1) {
    INFO(r.billions << "B on " << r.gpus << " GPUs, published tp=" << r.tp << " pp=" << r.pp);
    ModelSpec m = gpt(r.layers, r.hidden, r.heads, r.batch);
    m.dtype = Precision::kF16;
    m.recompute = Recompute::kFull;
    m.sequence_parallel = false;
    m.overlap_grad_reduce = false;
    m.overlap_p2p_comm = false;
    const auto [best, ratio] = compare(m, r.gpus, r.tp, r.pp, true);
    CHECK(best.tp == r.planner.tp);
    CHECK(best.pp == r.planner.pp);
    CHECK(ratio <= r.max_ratio);
    CHECK(ratio >= r.max_ratio - 0.002);
    if (best.tp == r.tp && best.pp == r.pp) {
      CHECK(ratio == 1.0);
      ++agree;
    }
    within_10_percent += ratio <= 1.1 ? 1 : 0;
  }
  CHECK(agree == 4);              // 1.7B, 3.6B, 76.1B and 1T
  CHECK(within_10_percent == 8);  // not 18.4B (14.4%), 39.1B (10.01%)
}

TEST_CASE("Megatron-LM's evaluation configurations (Korthikanti et al. 2022, Tables 3 and 5)", "[planner][published]") {
  // Korthikanti et al. 2022, Table 3: tp, pp, GPUs, global batch and micro-batch of four GPT
  // models (V = 51,200, s = 2,048), no data parallelism, sequence parallelism and selective
  // recomputation, interleaved with 3 virtual stages for 175B and 530B (section 6), on the
  // same DGX A100s, without overlapped gradient all-reduces (section 6.3); Table 5: their
  // iteration times. The planner is asked for the same GPU count and batch; the published
  // configuration is evaluated exactly as stated. The measured times check the predicted
  // ones (the model is optimistic: docs/PLANNER.md); nothing is fitted to them.
  struct Row {
    double billions;
    int64_t heads, hidden, layers;
    int tp, pp, gpus;
    int64_t batch, micro_batch;
    int virtual_stages;
    double measured_seconds;  // Table 5, "present work"
    ParallelConfig planner;   // what the planner chooses
    double max_ratio;         // published step time / planner's best, predicted, upper bound
    double max_optimism;      // measured / predicted step time of the published configuration, upper bound
  };
  const Row table3[] = {
      {22, 64, 6144, 48, 8, 1, 8, 4, 4, 1, 1.10, {4, 2, 1, 2, 24}, 1.054, 1.345},
      {175, 96, 12288, 96, 8, 8, 64, 64, 1, 3, 13.75, {4, 16, 1, 1, 6}, 1.029, 1.332},
      {530, 128, 20480, 105, 8, 35, 280, 280, 1, 3, 37.83, {8, 35, 1, 1, 3}, 1.0, 1.305},
      {1000, 160, 25600, 128, 8, 64, 512, 512, 1, 1, 71.49, {8, 64, 1, 1, 1}, 1.0, 1.249},
  };
  int agree = 0, within_10_percent = 0;
  for (const Row& r : table3) {
    INFO(r.billions << "B on " << r.gpus << " GPUs, published tp=" << r.tp << " pp=" << r.pp);
    ModelSpec m = gpt(r.layers, r.hidden, r.heads, r.batch);
    m.dtype = Precision::kF16;
    m.recompute = Recompute::kSelective;
    m.sequence_parallel = true;
    m.overlap_grad_reduce = false;
    m.overlap_p2p_comm = false;
    const ParallelConfig published{r.tp, r.pp, 1, r.micro_batch, r.virtual_stages};
    const auto [best, ratio] = compare_at(m, r.gpus, published);
    const double predicted = evaluate(m, published).step_seconds();
    CHECK(best == r.planner);
    CHECK(ratio <= r.max_ratio);
    CHECK(ratio >= r.max_ratio - 0.002);
    CHECK(r.measured_seconds / predicted <= r.max_optimism);
    CHECK(r.measured_seconds / predicted >= r.max_optimism - 0.01);
    agree += best.tp == r.tp && best.pp == r.pp ? 1 : 0;
    within_10_percent += ratio <= 1.1 ? 1 : 0;
  }
  CHECK(agree == 2);              // 530B and 1T; 22B takes (4, 2), 175B (4, 16)
  CHECK(within_10_percent == 4);  // 5.4% and 2.8% behind
}

TEST_CASE("PTD-P against ZeRO-3: model-parallel sizes on 384-2,240 GPUs (Narayanan et al. 2021, Table 2)",
          "[planner][published]") {
  // Narayanan et al. 2021, Table 2, the PTD-P rows: GPT-3 (174.6B: 96 layers, 96 heads,
  // hidden 12,288) at model-parallel size (tp x pp) 96 and the 529.6B model of Table 1 at
  // 280, micro-batch 1, global batch 1,536 and 2,240, on 384-1,536 and 560-2,240 GPUs, with
  // the achieved TFLOP/s per GPU. The table gives tp x pp only: the published configuration
  // is the best with that product and micro-batch 1. Settings as for Table 1 (same paper,
  // same code: full recomputation, FP16, no overlaps).
  struct Row {
    double billions;
    int64_t heads, hidden, layers;
    int model_parallel, gpus;
    int64_t batch;
    double measured_tflops;
    int planner_model_parallel;  // tp x pp of the planner's best
    double max_ratio;            // published step time / planner's best, predicted, upper bound
    double max_optimism;         // predicted / measured TFLOP/s per GPU, upper bound
  };
  const Row table2[] = {
      {174.6, 96, 12288, 96, 96, 384, 1536, 153, 48, 1.035, 1.468},
      {174.6, 96, 12288, 96, 96, 768, 1536, 149, 48, 1.029, 1.474},
      {174.6, 96, 12288, 96, 96, 1536, 1536, 141, 48, 1.030, 1.495},
      {529.6, 128, 20480, 105, 280, 560, 2240, 171, 280, 1.015, 1.359},
      {529.6, 128, 20480, 105, 280, 1120, 2240, 167, 280, 1.005, 1.374},
      {529.6, 128, 20480, 105, 280, 2240, 2240, 159, 280, 1.0, 1.408},
  };
  for (const Row& r : table2) {
    INFO(r.billions << "B on " << r.gpus << " GPUs, published tp x pp = " << r.model_parallel);
    ModelSpec m = gpt(r.layers, r.hidden, r.heads, r.batch);
    m.dtype = Precision::kF16;
    m.recompute = Recompute::kFull;
    m.sequence_parallel = false;
    m.overlap_grad_reduce = false;
    m.overlap_p2p_comm = false;
    auto plan = plan_parallelism(m, r.gpus);
    REQUIRE(plan.is_ok());
    const auto published = std::find_if(plan->begin(), plan->end(), [&](const Candidate& c) {
      return c.config.tp * c.config.pp == r.model_parallel && c.config.micro_batch == 1;
    });
    REQUIRE(published != plan->end());
    const Candidate& best = plan->front();
    const double ratio = published->step_seconds() / best.step_seconds();
    CHECK(best.config.tp * best.config.pp == r.planner_model_parallel);
    CHECK(ratio <= r.max_ratio);
    CHECK(ratio >= r.max_ratio - 0.002);
    CHECK(published->tflops_per_gpu() / r.measured_tflops <= r.max_optimism);
    CHECK(published->tflops_per_gpu() / r.measured_tflops >= r.max_optimism - 0.01);
  }
}

TEST_CASE("GPT-NeoX-20B on 96 A100-40GB (EleutherAI's configs/20B.yml)", "[planner][published]") {
  // EleutherAI/gpt-neox, configs/20B.yml ("as it was trained on 96x 40GB A100 GPUs"):
  // pipe-parallel-size 4, model-parallel-size 2 (so dp 12), 44 layers, hidden 6,144, 64
  // heads, seq 2,048, untied output layer, FP16, ZeRO stage 1 with overlap_comm (a
  // distributed optimizer, overlapped reduction), checkpoint-activations every layer, micro-
  // batch 4 and 32 accumulation steps (global batch 4 x 32 x 12 = 1,536), GPT-2's 50,257
  // tokens. Black et al. 2022 (its hardware description): twelve servers of eight A100-SXM4-40GB, every GPU
  // reaching InfiniBand through one of four ConnectX-6 HCAs (200 Gbit/s for two GPUs: 100
  // each); NVSwitch inside (HGX A100); the 40 GB A100's 1,555 GB/s (NVIDIA datasheet).
  // DeepSpeed's pipeline runs 1F1B, not interleaved. Differences this model ignores: rotary
  // instead of learned position embeddings (s h = 12.6M parameters), attention and MLP in
  // parallel (gpt_j_residual: the same FLOPs).
  ModelSpec m = gpt(44, 6144, 64, 1536);
  m.vocab = 50257;
  m.dtype = Precision::kF16;
  m.distributed_optimizer = true;
  m.recompute = Recompute::kFull;
  m.sequence_parallel = false;
  m.tied_embeddings = false;
  m.flash_attention = false;
  m.interleave = false;
  m.overlap_p2p_comm = false;
  m.overlap_param_gather = false;  // DeepSpeed gathers the updated weights after the step
  m.gpu = {40, 312, 8, 2400, 100, 108, 1555};
  CHECK(padded_vocab(m, 2) == 50432);  // the released model's embedding rows
  const auto [best, ratio] = compare_at(m, 96, {2, 4, 12, 4});
  // The planner takes half the stages, twice the dp and half the micro-batch (26.3 GiB of 40,
  // where the published configuration needs 21.1), 4.4% ahead.
  CHECK(best == ParallelConfig{2, 2, 24, 2});
  CHECK(ratio == Approx(1.0440).epsilon(1e-3));
  CHECK(evaluate(m, {2, 4, 12, 4}).memory_gb() == Approx(21.05).epsilon(1e-3));
  CHECK(evaluate(m, best).memory_gb() == Approx(26.26).epsilon(1e-3));
}

TEST_CASE("BLOOM-176B on 384 A100-80GB (BigScience's tr11-176B-ml): the published tp, the stages halved",
          "[planner][published]") {
  // bigscience-workshop/bigscience, train/tr11-176B-ml/tr11-176B-ml.slurm (the 48-node
  // version, ed196cd): 70 layers, hidden 14,336, 112 heads, seq 2,048, TP_SIZE 4, PP_SIZE 12
  // (so dp 8), MICRO_BATCH_SIZE 2, GLOBAL_BATCH_SIZE 2,048, --bf16 with DeepSpeed's
  // BF16_Optimizer ("its own zero stage 1": a distributed optimizer), --checkpoint-activations
  // (every layer), --pad-vocab-size-to 250880 (250,680 tokens), ALiBi, tied embeddings
  // (Megatron-DeepSpeed's GPTModelPipe), dropout at Megatron-DeepSpeed's default 0.1, and
  // --pp-partition-method 'type:transformer|embedding': the embedding and the tied output
  // layer count as layers, 72 over 12 stages (the run's README: 5 blocks on the first and last
  // stage, 6 between). DeepSpeed's pipeline: 1F1B, not interleaved, the gradients reduced
  // after the last backward pass. Its README: 48 nodes of 8 A100 80GB, 4 Omni-Path links of
  // 100 Gbit/s per node (50 per GPU); NVLink inside (assumed 300 GB/s per direction, HGX
  // A100). Measured: 149-150 TFLOP/s per GPU, about 105 s a step (its chronicles), counted
  // as Narayanan et al.'s eq. 3 with recomputation, as tflops_per_gpu counts.
  ModelSpec m = gpt(70, 14336, 112, 2048);
  m.vocab = 250680;
  m.distributed_optimizer = true;
  m.recompute = Recompute::kFull;
  m.sequence_parallel = false;
  m.interleave = false;
  m.overlap_grad_reduce = false;
  m.overlap_p2p_comm = false;
  m.overlap_param_gather = false;
  m.pipeline_split = PipelineSplit::kEmbeddingAndLoss;
  m.gpu = {80, 312, 8, 2400, 50};
  CHECK(padded_vocab(m, 4) == 250880);
  CHECK(stage_layers(m, 12, 0) == 5);
  const ParallelConfig published{4, 12, 8, 2};
  const auto [best, ratio] = compare_at(m, 384, published);
  // The planner keeps tp 4 and doubles the stages: 24 stages halve the gradients each GPU
  // reduces over 50 Gbit/s after the backward pass (2.1 s against 3.9). The published
  // configuration is 2.5% behind at its micro-batch 2, 0.6% at micro-batch 1.
  CHECK(best == ParallelConfig{4, 24, 4, 1});
  CHECK(ratio == Approx(1.0254).epsilon(1e-3));
  CHECK(compare_at(m, 384, {4, 12, 8, 1}).second == Approx(1.0062).epsilon(1e-3));
  // Predicted 219.5 TFLOP/s where 149-150 were measured: 1.47x, as optimistic as the
  // A100 runs of Narayanan et al. (1.24-1.49x).
  const Candidate pub = evaluate(m, published);
  CHECK(pub.tflops_per_gpu() == Approx(219.51).epsilon(1e-3));
  CHECK(pub.memory_gb() == Approx(37.210).epsilon(1e-4));
  // The split takes a layer from the first stage: with the even split it holds 6 layers and
  // needs 5.6 GiB more.
  m.pipeline_split = PipelineSplit::kEven;
  CHECK(evaluate(m, published).memory_gb() == Approx(42.830).epsilon(1e-4));
}

TEST_CASE("Nemotron-4 340B on 6,144 H100s (NVIDIA's NeMo launcher): the published tp, fewer stages",
          "[planner][published]") {
  // NVIDIA/NeMo-Framework-Launcher, launcher_scripts/conf/training/nemotron/nemotron_340b.yaml
  // at 7c842fc ("actual GPU/GBS numbers used in pretraining"): 768 nodes of 8, tp 8, pp 12,
  // virtual 8 (so dp 64), micro-batch 1, global batch 2,304, seq 4,096, 96 layers, hidden
  // 18,432, 96 heads, 8 query groups, ffn 4h (squared ReLU: GeLU's shapes), untied, dropout 0,
  // selective recomputation, sequence parallelism, a distributed optimizer overlapping its
  // gradient reduction and weight gather (grad_sync_dtype bf16), overlap_p2p_comm false;
  // Transformer Engine (FlashAttention). Its
  // vocabulary: 256,000 (the released config.json). The same file at 630e654 (December 2024)
  // runs pp 8 with 12 virtual stages and the sends overlapped. H100 SXM as for Llama 3 above.
  // RoPE and the missing biases are ignored (under 0.1% of the parameters).
  ModelSpec m = nemotron4(96, 18432, 96, 2304);
  m.recompute = Recompute::kSelective;
  m.overlap_p2p_comm = false;
  const auto [best, ratio] = compare_at(m, 6144, {8, 12, 64, 1, 8});
  // The planner keeps tp 8 and takes 6 stages of 8 chunks: at pp 12 the last stage's 8
  // layers plus the 256,000-wide output layer set every slot's pace; at pp 6 the output
  // layer is a smaller share of 16 layers. The pretraining configuration is 4.4% behind.
  CHECK(best == ParallelConfig{8, 6, 128, 1, 8});
  CHECK(ratio == Approx(1.0442).epsilon(1e-3));
  CHECK(evaluate(m, {8, 12, 64, 1, 8}).memory_gb() == Approx(42.73).epsilon(1e-3));
  CHECK(evaluate(m, best).memory_gb() == Approx(55.30).epsilon(1e-3));
  // With the sends overlapped, as the later recipe runs them, the later recipe's 8 stages of
  // 12 chunks are 0.7% behind the planner's 6 of 16.
  m.overlap_p2p_comm = true;
  const auto [later, later_ratio] = compare_at(m, 6144, {8, 8, 96, 1, 12});
  CHECK(later == ParallelConfig{8, 6, 128, 1, 16});
  CHECK(later_ratio == Approx(1.0070).epsilon(1e-3));
}

TEST_CASE("NVIDIA's tuned H100 recipes (NVIDIA/dgxc-benchmarking): GPT-3 175B, Nemotron-4 15B and 340B",
          "[planner][published]") {
  // DGX H100 (989 TFLOP/s dense BF16, 132 SMs, 3,350 GB/s; NVLink 450 GB/s per direction, one
  // 400 Gbit/s InfiniBand card per GPU), BF16, Megatron Core through NeMo with Transformer
  // Engine (FlashAttention), sequence parallelism, the distributed optimizer with its
  // gradient reduce-scatter and weight all-gather overlapped. Each README's table gives tp,
  // pp, virtual stages, micro-batch and global batch at each size and the measured step time.
  // The recipes also overlap the tp collectives with the GEMMs (Transformer Engine), which
  // the model leaves out (docs/PLANNER.md).
  SECTION("GPT-3 175B on 128-2,048 GPUs: (4, 8) at every size") {
    // nemo_megatron/README_175b.md and gpt3_175b_hydra.yaml at 8f5cbb3 (v25.02): 96 layers,
    // hidden 12,288, 96 heads, seq 2,048, GPT-2's 50,257 tokens, tied, dropout 0.1, no
    // recomputation, tp 4, pp 8, VP 12 (the README; the yaml says 6), micro-batch 1, global
    // batch 2 x GPUs, distributed_fused_adam with grad_sync_dtype bf16, overlap_p2p_comm.
    // Measured 8.309 s at 128 GPUs to 8.49 s at 2,048.
    ModelSpec m = gpt(96, 12288, 96, 256);
    m.vocab = 50257;
    m.flash_attention = true;
    m.distributed_optimizer = true;
    m.grad_reduce_in_bf16 = true;
    m.gpu = h100();
    for (int gpus : {128, 256, 512, 1024, 2048}) {
      INFO(gpus << " GPUs");
      m.global_batch = 2 * gpus;
      const auto [best, ratio] = compare_at(m, gpus, {4, 8, gpus / 32, 1, 12});
      // The same tp, pp and virtual stages; micro-batch 2, 2.9% ahead of the published 1.
      CHECK(best == ParallelConfig{4, 8, gpus / 32, 2, 12});
      CHECK(ratio == Approx(1.0289).epsilon(1e-3));
    }
    m.global_batch = 256;
    CHECK(8.309 / evaluate(m, {4, 8, 4, 1, 12}).step_seconds() == Approx(1.353).epsilon(1e-3));
    // At the yaml's 6 virtual stages, 3.8% behind; with FP32 gradients (2 bytes more per
    // parameter held and reduced) the planner would take pp 16.
    CHECK(compare_at(m, 128, {4, 8, 4, 1, 6}).second == Approx(1.038).epsilon(1e-3));
    m.grad_reduce_in_bf16 = false;
    CHECK(compare_at(m, 128, {4, 8, 4, 1, 12}).first.pp == 16);
  }

  SECTION("Nemotron-4 15B on 16-2,048 GPUs: (2, 1) with micro-batch 2 from 64 GPUs on") {
    // nemotron/README.md at 85380ff (v25.04.01): 32 layers, hidden 6,144, 48 heads, 8 query
    // groups, ffn 4h (squared ReLU), seq 4,096, tp 2, pp 1, micro-batch 2, global batch 4 x
    // GPUs; measured 2.66 s at 16 GPUs to 2.78 s at 2,048. The rest from
    // nemotron4-15b-synth.yaml at 8f5cbb3: untied, dropout 0, no recomputation, vocabulary
    // 256,000.
    ModelSpec m = nemotron4(32, 6144, 48, 64);
    // BF16 gradients, as the README's log shows: after a step at 64 GPUs 34,466,545,664 bytes
    // stay allocated, where weights, gradients and the optimizer's share are 34.30e9 by this
    // model with BF16 gradients (49.98e9 with FP32 ones).
    m.global_batch = 256;
    const MemoryEstimate state = estimate_memory(m, {2, 1, 32, 2});
    CHECK(state.weights + state.gradients + state.optimizer == Approx(34.30e9).epsilon(1e-3));
    m.global_batch = 64;
    // On 2 nodes the planner keeps dp inside a node (stages across them): 1.7% ahead.
    const auto [two_nodes, ratio] = compare_at(m, 16, {2, 1, 8, 2});
    CHECK(two_nodes == ParallelConfig{1, 2, 8, 1, 16});
    CHECK(ratio == Approx(1.0174).epsilon(1e-3));
    for (int gpus : {64, 256, 2048}) {
      INFO(gpus << " GPUs");
      m.global_batch = 4 * gpus;
      CHECK(compare_at(m, gpus, {2, 1, gpus / 2, 2}).first == ParallelConfig{2, 1, gpus / 2, 2});
    }
    m.global_batch = 64;
    CHECK(2.66 / evaluate(m, {2, 1, 8, 2}).step_seconds() == Approx(1.184).epsilon(1e-3));
  }

  SECTION("Llama 3.1 8B and 70B: the same tp and pp, the recipes' context parallelism left out") {
    // llama3.1/README_8b.md and README_70b.md at 8f5cbb3 (v25.02), llama3.1_8b.yaml and
    // llama3.1_70b.yaml at 35a9aec: seq 8,192, 8 query groups, SwiGLU, untied, dropout 0, no
    // recomputation, grad_sync_dtype bf16, overlap_p2p_comm. 8B: 32 layers, hidden 4,096, 32
    // heads, ffn 14,336, tp 1, pp 1, cp 2, micro-batch 1, global batch 16 x GPUs, no sequence
    // parallelism; measured 12.78 s at 8 GPUs. 70B: 80 layers, hidden 8,192, 64 heads, ffn
    // 28,672, tp 4, pp 4, cp 2, VP 5, micro-batch 1, global batch 2 x GPUs; measured 14.61 s
    // at 64 GPUs. The model has no context parallelism: its dp takes the recipes' cp x dp.
    ModelSpec small = llama(32, 4096, 32, 8, 14336, 128256);
    small.seq = 8192;
    small.dropout = false;
    small.sequence_parallel = false;
    small.distributed_optimizer = true;
    small.grad_reduce_in_bf16 = true;
    small.gpu = h100();
    for (int gpus : {8, 16, 32, 64, 128}) {
      INFO("8B on " << gpus << " GPUs");
      small.global_batch = 16 * gpus;
      CHECK(compare_at(small, gpus, {1, 1, gpus, 1}).first == ParallelConfig{1, 1, gpus, 1});
    }
    small.global_batch = 128;
    CHECK(12.78 / evaluate(small, {1, 1, 8, 1}).step_seconds() == Approx(1.103).epsilon(1e-3));

    ModelSpec large = llama(80, 8192, 64, 8, 28672, 128256);
    large.seq = 8192;
    large.dropout = false;
    large.distributed_optimizer = true;
    large.grad_reduce_in_bf16 = true;
    large.gpu = small.gpu;
    for (int gpus : {64, 128, 256, 512, 1024, 2048}) {
      INFO("70B on " << gpus << " GPUs");
      large.global_batch = 2 * gpus;
      // (4, 4) with 20 chunks up to 128 GPUs, then (4, 2) with 40 (its bubble, at more
      // micro-batches per pipeline, smaller): the published (4, 4, v 5) within 3%.
      const auto [best, ratio] = compare_at(large, gpus, {4, 4, gpus / 16, 1, 5});
      CHECK(best == (gpus <= 128 ? ParallelConfig{4, 4, gpus / 16, 1, 20} : ParallelConfig{4, 2, gpus / 8, 1, 40}));
      CHECK(ratio == Approx(gpus <= 128 ? 1.0139 : 1.0294).epsilon(1e-3));
    }
    large.global_batch = 128;
    CHECK(14.61 / evaluate(large, {4, 4, 4, 1, 5}).step_seconds() == Approx(1.192).epsilon(1e-3));

    // Allowed to choose cp as the recipes do, the planner keeps cp 1 for the 8B (the
    // published cp 2 2.0% behind) and takes tp 2, cp 2, pp 8 for the 70B (the published 4.8%
    // behind): the model hides the ring's sends behind attention but charges the tp
    // collectives in full (the recipes overlap those too: docs/PLANNER.md).
    small.context_parallel = true;
    const auto [small_best, small_ratio] = compare_at(small, 8, {1, 1, 4, 1, 1, 2});
    CHECK(small_best == ParallelConfig{1, 1, 8, 1});
    CHECK(small_ratio == Approx(1.0205).epsilon(1e-3));
    large.context_parallel = true;
    const auto [large_best, large_ratio] = compare_at(large, 64, {4, 4, 2, 1, 5, 2});
    CHECK(large_best == ParallelConfig{2, 8, 2, 1, 10, 2});
    CHECK(large_ratio == Approx(1.0482).epsilon(1e-3));
  }

  SECTION("Llama 3.1 405B on 576-2,304 GPUs: fits only with context parallelism") {
    // llama3.1/README_405b.md at 8f5cbb3 and llama3.1_405b.yaml at 35a9aec: 126 layers,
    // hidden 16,384, 128 heads, 16 query groups (the yaml's), ffn 53,248, seq 8,192, tp 8,
    // pp 9, cp 2, VP 7, micro-batch 1, global batch 252 per 576 GPUs; measured 17.50 s at 576
    // GPUs to 17.70 s at 2,304.
    ModelSpec m = llama(126, 16384, 128, 16, 53248, 128256);
    m.seq = 8192;
    m.global_batch = 252;
    m.dropout = false;
    m.distributed_optimizer = true;
    m.grad_reduce_in_bf16 = true;
    m.gpu = h100();
    // Without context parallelism no configuration fits: every one keeps a whole sequence of
    // 8,192 tokens per GPU.
    CHECK_FALSE(plan_parallelism(m, 576).is_ok());
    m.context_parallel = true;
    for (int gpus : {576, 1152, 2304}) {
      INFO(gpus << " GPUs");
      m.global_batch = 252 * gpus / 576;
      const auto [best, ratio] = compare_at(m, gpus, {8, 9, gpus / 144, 1, 7, 2});
      // Half the tp and twice the cp and stages; the published 2.7% behind.
      CHECK(best == ParallelConfig{4, 18, gpus / 288, 1, 7, 4});
      CHECK(ratio == Approx(1.0275).epsilon(1e-3));
    }
    m.global_batch = 252;
    CHECK(17.50 / evaluate(m, {8, 9, 4, 1, 7, 2}).step_seconds() == Approx(1.221).epsilon(1e-3));
  }

  SECTION("Nemotron-4 340B on 256-2,048 GPUs: (8, 8) with 12 virtual stages at every size") {
    // nemotron/README.md at 85380ff: 96 layers, hidden 18,432, 96 heads, 8 query groups, seq
    // 4,096, tp 8, pp 8 (VP 12 in its launch.sh), micro-batch 1, global batch GPUs / 4;
    // measured 4.36 s at 256 GPUs to 4.43 s at 2,048. The rest from nemotron4-340b-synth.yaml
    // at 8f5cbb3: untied, dropout 0, selective recomputation, distributed_fused_adam with
    // grad_sync_dtype bf16, overlap_p2p_comm false.
    ModelSpec m = nemotron4(96, 18432, 96, 64);
    m.recompute = Recompute::kSelective;
    m.overlap_p2p_comm = false;
    for (int gpus : {256, 512, 1024, 2048}) {
      INFO(gpus << " GPUs");
      m.global_batch = gpus / 4;
      const auto [best, ratio] = compare_at(m, gpus, {8, 8, gpus / 64, 1, 12});
      CHECK(best.tp == 8);
      CHECK(best.pp == 8);
      CHECK(best.virtual_stages == 12);
      // Micro-batch 1 as published on 256 and 512 GPUs; 2, 2.0% ahead, on 1,024 and 2,048.
      CHECK(best.micro_batch == (gpus <= 512 ? 1 : 2));
      CHECK(ratio == Approx(gpus <= 512 ? 1.0 : 1.0203).epsilon(1e-3));
    }
    m.global_batch = 64;
    CHECK(4.36 / evaluate(m, {8, 8, 4, 1, 12}).step_seconds() == Approx(1.226).epsilon(1e-3));
  }
}

TEST_CASE("Tenplex's parallelism table for GPT-3 XL on 4, 8 and 16 GPUs", "[planner][published]") {
  // kungfu-team/tenplex, benchmark/dynamic_resources: run.sh trains Megatron-LM's GPT "xl"
  // (tenplex-run/job/params_gpt.go: 24 layers, hidden 2064, 24 heads; seq 1024, GPT-2's
  // 50,257-token vocabulary) in FP16 with global batch 128 and micro-batch 8, 4 GPUs per
  // host; tenplex-para-config.json: 4 GPUs tp=2,pp=2; 8 GPUs tp=2,pp=4; 16 GPUs
  // tp=2,pp=4,dp=2. The GPUs are not in the scripts: assumed here 48 GiB (which micro-batch
  // 8 needs: about 26 GiB at tp=2, pp=2 by this model), 150 TFLOP/s, PCIe 4.0 x16 inside a
  // host (256 Gbit/s), 100 Gbit/s between hosts.
  ModelSpec m = gpt(24, 2064, 24, 128);
  m.vocab = 50257;
  m.seq = 1024;
  m.dtype = Precision::kF16;
  m.sequence_parallel = false;
  m.flash_attention = false;  // Megatron-LM's --use-flash-attn is not in run.sh
  m.gpu = {48, 150, 4, 256, 100};
  struct Row {
    int gpus, tp, pp, dp;
    ParallelConfig planner;
    double max_ratio;  // Tenplex's configuration at micro-batch 8 over the planner's best
  };
  const Row table[] = {
      {4, 2, 2, 1, {1, 1, 4, 4}, 1.489},
      {8, 2, 4, 1, {1, 2, 4, 4, 12}, 1.696},
      {16, 2, 4, 2, {1, 2, 8, 4, 12}, 1.691},
  };
  for (const Row& r : table) {
    INFO(r.gpus << " GPUs");
    const auto [best, ratio] = compare_at(m, r.gpus, {r.tp, r.pp, r.dp, 8});
    CHECK(best == r.planner);
    CHECK(ratio <= r.max_ratio);
    CHECK(ratio > 1.2);  // the planner disagrees, and by a margin its model is sure of
  }
}

TEST_CASE("a Llama-style model: SwiGLU, untied output layer, long sequences with and without FlashAttention",
          "[planner][published]") {
  // Llama 2 7B (Touvron et al. 2023b): 32 layers, hidden 4096, 32 heads, SwiGLU of width
  // 11,008, vocabulary 32,000, untied output layer; 6,738,415,616 parameters as released.
  // This model is Megatron's GPT of that shape: it adds learned position embeddings (s h),
  // biases on every linear layer ((h + 2kv) + h + 2f + h per layer) and LayerNorm biases
  // (2h per layer, h for the final one).
  ModelSpec m = llama(32, 4096, 32, 32, 11008, 32000);
  const int64_t extras = 32 * ((4096 + 2 * 4096) + 4096 + 2 * 11008 + 4096 + 2 * 4096) + 4096;
  for (int64_t seq : {4096, 8192, 32768}) {
    INFO("seq " << seq);
    m.seq = seq;
    m.global_batch = 4 * 1024 * 1024 / seq;  // 4M tokens per step, as Llama 2 trained
    CHECK(model_params(m) == 6738415616 + extras + seq * 4096);
    m.flash_attention = true;
    auto flash = plan_parallelism(m, 64);
    REQUIRE(flash.is_ok());
    m.flash_attention = false;
    auto plain = plan_parallelism(m, 64);
    if (seq == 32768) {
      // Without FlashAttention the 32 heads' 32k x 32k scores (5 a s^2 b / t bytes per layer)
      // fit nowhere: 657 GiB of activations on the smallest configuration.
      REQUIRE_FALSE(plain.is_ok());
      CHECK_THAT(plain.status().message(), Catch::Contains("activations 657.19 GiB"));
      continue;
    }
    REQUIRE(plain.is_ok());
    // FlashAttention fits more configurations and is predicted faster at the best of each.
    CHECK(flash->size() > plain->size());
    CHECK(flash->front().step_seconds() < plain->front().step_seconds());
  }
}

TEST_CASE("Llama 3 405B on 8,192 and 16,384 H100s (Llama 3 paper, Table 4): the published choice with its split",
          "[planner][published]") {
  // Grattafiori et al. 2024 (The Llama 3 Herd of Models), Table 3: 126 layers, hidden
  // 16,384, FFN 53,248 (SwiGLU), 128 heads, 8 key/value heads, vocabulary 128K (128,256 as
  // released; untied). Table 4: seq 8,192, 16M tokens per step (2,048 sequences), tp 8, pp 16, dp 64 on 8,192
  // GPUs and dp 128 on 16,384, measured 430 and 400 TFLOP/s per GPU (BF16, no recomputation
  // counted); section 3.3.2: no activation checkpointing, FSDP sharding optimizer state (and
  // gradients, not modelled: a distributed optimizer here), the first and last stages a layer
  // short (the embedding-and-loss split), an interleaved schedule. H100 SXM 80 GB: 989 TFLOP/s
  // dense BF16, 132 SMs, 3,350 GB/s, NVLink 450 GB/s per direction (3,600 Gbit/s), 400 Gbit/s
  // per GPU between servers. Assumed: sequence parallelism, FlashAttention, no dropout.
  ModelSpec m = llama(126, 16384, 128, 8, 53248, 128256);
  m.seq = 8192;
  m.global_batch = 2048;
  m.distributed_optimizer = true;
  m.dropout = false;
  m.gpu = h100();
  const ParallelConfig published{8, 16, 64, 1};

  SECTION("with the even split the published configuration does not fit") {
    // 126 layers split into 16 stages of 8 and 7 admit no interleaving (16 v does not
    // divide 126), and the first stage keeps 16 micro-batches of 8 layers: 84.2 GiB. The
    // planner takes 32 stages instead.
    CHECK_FALSE(validate_config(m, {8, 16, 64, 1, 2}).is_ok());
    const Candidate pub = evaluate(m, published);
    CHECK(pub.memory_gb() == Approx(84.233).epsilon(1e-4));
    CHECK_FALSE(fits(m, pub.memory));
    auto plan = plan_parallelism(m, 8192);
    REQUIRE(plan.is_ok());
    CHECK(plan->front().config == ParallelConfig{8, 32, 32, 1});
    CHECK(pub.step_seconds() / plan->front().step_seconds() == Approx(0.9919).epsilon(1e-3));
  }

  SECTION("with Meta's split (the embedding and the loss one layer each) the planner picks it") {
    m.pipeline_split = PipelineSplit::kEmbeddingAndLoss;
    // 128 slots: 7 layers on the first and last stage, 8 between. The fullest GPU is now
    // stage 1 (8 layers x 15 micro-batches in flight, against stage 0's 7 x 16): 59.6 GiB of
    // activations, 18.4 GiB of state.
    const Candidate pub = evaluate(m, published);
    CHECK(pub.memory.stage == 1);
    CHECK(pub.memory.activations == Approx(120 * 533.2e6).epsilon(1e-3));
    CHECK(pub.memory_gb() == Approx(77.964).epsilon(1e-4));
    CHECK(fits(m, pub.memory));
    auto plan = plan_parallelism(m, 8192);
    REQUIRE(plan.is_ok());
    CHECK(plan->front().config == published);
    // Predicted 469.9 TFLOP/s against the 430 measured (1.09x, where the A100 runs of
    // Narayanan et al. were 1.24-1.49x).
    CHECK(pub.tflops_per_gpu() == Approx(469.94).epsilon(1e-3));

    auto wide = plan_parallelism(m, 16384);
    REQUIRE(wide.is_ok());
    CHECK(wide->front().config == ParallelConfig{8, 16, 128, 1});
    // With m = 16 micro-batches the uninterleaved bubble is 15 slots to the micro-batches'
    // 16: 353 TFLOP/s predicted, below the 400 measured. Two interleaved stages (valid now:
    // 32 divides 128) would halve it, 464 TFLOP/s, but keep 1.47 times the activations
    // (105.6 GiB by this model). Meta's schedule, which tunes the micro-batches in flight,
    // lies between the two.
    const Candidate flat = wide->front();
    CHECK(flat.step.bubble / (flat.step.compute + flat.step.tp_comm + flat.step.pp_comm) == Approx(15.0 / 16));
    CHECK(flat.tflops_per_gpu() == Approx(352.96).epsilon(1e-3));
    const Candidate two = evaluate(m, {8, 16, 128, 1, 2});
    CHECK(validate_config(m, two.config).is_ok());
    CHECK(two.tflops_per_gpu() == Approx(464.24).epsilon(1e-3));
    CHECK(two.memory_gb() == Approx(105.62).epsilon(1e-3));
  }
}
