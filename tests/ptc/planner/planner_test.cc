#include "ptc/planner/planner.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "model_fixtures.h"

using namespace ptcfs;
using namespace ptcfs::planner;
using ptcfs::planner::testing::small_model;

namespace {

std::string name(const ParallelConfig& c) {
  return std::to_string(c.tp) + "/" + std::to_string(c.pp) + "/" + std::to_string(c.dp) + "/" +
         std::to_string(c.micro_batch) + (c.virtual_stages > 1 ? "v" + std::to_string(c.virtual_stages) : "");
}

std::vector<std::string> names(const std::vector<ParallelConfig>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(name(c));
  return out;
}

// The planner's rules written out again as a brute force over every tp, pp, micro_batch up
// to their bounds, ranked by its own comparison: the reference plan_parallelism must equal.
std::vector<Candidate> exhaustive(const ModelSpec& m, int gpus) {
  std::vector<Candidate> out;
  for (int tp = 1; tp <= gpus; ++tp)
    for (int cp = 1; cp <= gpus; ++cp)
      for (int pp = 1; pp <= gpus; ++pp)
        for (int64_t b = 1; b <= m.global_batch; ++b)
          for (int v = 1; v <= m.layers + 2; ++v) {
            if (gpus % (tp * cp * pp) != 0) continue;
            // Context parallelism: allowed, and 2 cp divides the sequence.
            if (cp > 1 && (!m.context_parallel || m.seq % (2 * cp) != 0)) continue;
            const int dp = gpus / (tp * cp * pp);
            if (m.heads % tp || m.query_groups % tp || m.ffn % tp || tp > m.gpu.per_node) continue;
            if (pp > m.layers || m.global_batch % (dp * b)) continue;
            // The embedding-and-loss split: pp divides the layers + 2 slots.
            const bool split = m.pipeline_split == PipelineSplit::kEmbeddingAndLoss;
            const int64_t slots = m.layers + (split ? 2 : 0);
            if (split && pp > 1 && slots % pp) continue;
            // Interleaving: pp > 1, pp x v divides the slots, pp divides the micro-batches.
            if (v > 1 && (!m.interleave || pp == 1 || slots % (pp * v) || (m.global_batch / (dp * b)) % pp)) continue;
            const ParallelConfig c{tp, pp, dp, b, v, cp};
            const MemoryEstimate mem = estimate_memory(m, c);
            if (mem.total() > m.gpu.memory_gb * 1024 * 1024 * 1024) continue;
            out.push_back({c, mem, estimate_step(m, c)});
          }
  std::sort(out.begin(), out.end(), [](const Candidate& x, const Candidate& y) {
    if (x.step.total() != y.step.total()) return x.step.total() < y.step.total();
    if (x.memory.total() != y.memory.total()) return x.memory.total() < y.memory.total();
    return std::tie(x.config.tp, x.config.cp, x.config.pp, x.config.micro_batch, x.config.virtual_stages) <
           std::tie(y.config.tp, y.config.cp, y.config.pp, y.config.micro_batch, y.config.virtual_stages);
  });
  return out;
}

}  // namespace

TEST_CASE(
    "valid configurations of 8 GPUs: tp divides heads and ffn within a node, pp <= layers, dp x b divides "
    "the batch",
    "[planner]") {
  // small_model: 4 heads, ffn 256, 4 layers, global batch 8, 4 GPUs per node. Interleaved
  // (vV): pp = 2 with v = 2 (pp x v divides 4 layers) when pp divides the micro-batches.
  const std::vector<std::string> expected = {
      "1/1/8/1",                                                  // tp=1
      "1/2/4/1", "1/2/4/1v2", "1/2/4/2",                          //
      "1/4/2/1", "1/4/2/2",   "1/4/2/4",                          //
      "2/1/4/1", "2/1/4/2",                                       // tp=2
      "2/2/2/1", "2/2/2/1v2", "2/2/2/2", "2/2/2/2v2", "2/2/2/4",  //
      "2/4/1/1", "2/4/1/2",   "2/4/1/4", "2/4/1/8",               //
      "4/1/2/1", "4/1/2/2",   "4/1/2/4",                          // tp=4
      "4/2/1/1", "4/2/1/1v2", "4/2/1/2", "4/2/1/2v2", "4/2/1/4", "4/2/1/4v2", "4/2/1/8",
  };
  CHECK(names(valid_configs(small_model(), 8)) == expected);
  for (const auto& c : valid_configs(small_model(), 8)) CHECK(validate_config(small_model(), c).is_ok());
  ModelSpec plain = small_model();
  plain.interleave = false;
  for (const auto& c : valid_configs(plain, 8)) CHECK(c.virtual_stages == 1);
  CHECK(valid_configs(plain, 8).size() == expected.size() - 6);
}

TEST_CASE("validate_config names the rule a configuration breaks", "[planner]") {
  ModelSpec m = small_model();
  m.query_groups = 2;
  const auto message = [&](ParallelConfig c) { return validate_config(m, c).message(); };
  CHECK(message({4, 1, 1, 1}) ==
        "tp=4,pp=1,dp=1,micro_batch=1: tp must divide heads (4), query_groups (2) and ffn (256)");
  m.query_groups = 4;
  m.gpu.per_node = 2;
  CHECK(message({4, 1, 1, 1}) == "tp=4,pp=1,dp=1,micro_batch=1: tp is more than the 2 GPUs of a node");
  CHECK(message({1, 5, 1, 1}) == "tp=1,pp=5,dp=1,micro_batch=1: pp is more than the 4 layers");
  CHECK(message({1, 1, 3, 1}) == "tp=1,pp=1,dp=3,micro_batch=1: dp x micro_batch must divide global_batch (8)");
  CHECK(message({1, 1, 2, 8}) == "tp=1,pp=1,dp=2,micro_batch=8: dp x micro_batch must divide global_batch (8)");
  CHECK(message({0, 1, 1, 1}) == "tp=0,pp=1,dp=1,micro_batch=1: every degree must be at least 1");
  // Interleaving: 4 layers over pp = 2 in v = 4 chunks is 8 chunks; pp = 1 has no stages
  // to interleave; 8 / (4 x 2) = 1 micro-batch is no multiple of pp = 2.
  const std::string rule =
      "virtual stages need pp > 1, pp x virtual_stages dividing the 4 layers and pp dividing "
      "the micro-batches";
  CHECK(message({1, 2, 1, 1, 4}) == "tp=1,pp=2,dp=1,micro_batch=1,virtual_stages=4: " + rule);
  CHECK(message({1, 1, 1, 1, 2}) == "tp=1,pp=1,dp=1,micro_batch=1,virtual_stages=2: " + rule);
  CHECK(message({1, 2, 4, 2, 2}) == "tp=1,pp=2,dp=4,micro_batch=2,virtual_stages=2: " + rule);
  CHECK(validate_config(m, {1, 2, 2, 1, 2}).is_ok());
  m.interleave = false;
  CHECK(message({1, 2, 2, 1, 2}) ==
        "tp=1,pp=2,dp=2,micro_batch=1,virtual_stages=2: virtual stages need \"interleave\": true");
  // The embedding-and-loss split: 4 layers + 2 = 6 slots, which pp = 4 does not divide; pp = 3
  // gives the first and last stage 1 layer and the middle one 2; v = 2 chunks of pp = 3 need
  // 6 slots, v = 3 nine.
  m.interleave = true;
  m.pipeline_split = PipelineSplit::kEmbeddingAndLoss;
  CHECK(message({1, 4, 1, 1}) ==
        "tp=1,pp=4,dp=1,micro_batch=1: pipeline_split embedding_and_loss needs pp to divide the 6 slots (4 layers, "
        "the embedding and the loss)");
  CHECK(validate_config(m, {1, 3, 1, 1}).is_ok());
  CHECK(validate_config(m, {1, 2, 1, 1}).is_ok());
  CHECK(message({1, 3, 1, 1, 3}) ==
        "tp=1,pp=3,dp=1,micro_batch=1,virtual_stages=3: virtual stages need pp > 1, pp x virtual_stages dividing the "
        "6 slots (4 layers, the embedding and the loss) and pp dividing the micro-batches");
  m.global_batch = 6;
  CHECK(validate_config(m, {1, 3, 1, 2, 2}).is_ok());
  // Context parallelism: only with "context_parallel", and 2 cp must divide seq (32).
  m.pipeline_split = PipelineSplit::kEven;
  CHECK(message({1, 1, 1, 1, 1, 2}) == "tp=1,cp=2,pp=1,dp=1,micro_batch=1: cp > 1 needs \"context_parallel\": true");
  m.context_parallel = true;
  CHECK(validate_config(m, {1, 1, 1, 1, 1, 2}).is_ok());
  CHECK(message({1, 1, 1, 1, 1, 32}) == "tp=1,cp=32,pp=1,dp=1,micro_batch=1: cp needs 2 x cp to divide seq (32)");
  CHECK(message({1, 1, 1, 1, 1, 0}) == "tp=1,cp=0,pp=1,dp=1,micro_batch=1: every degree must be at least 1");
}

TEST_CASE("plan refuses 0 GPUs, a count with no valid configuration, and a model that fits nowhere", "[planner]") {
  const ModelSpec m = small_model();
  auto zero = plan_parallelism(m, 0);
  REQUIRE_FALSE(zero.is_ok());
  CHECK(zero.status().message() == "gpus must be at least 1, got 0");

  // 7 GPUs: tp = 1 (7 is prime), pp = 1 (at most 4 layers), dp = 7 does not divide 8.
  auto seven = plan_parallelism(m, 7);
  REQUIRE_FALSE(seven.is_ok());
  CHECK(seven.status().code() == Code::kInvalidArgument);
  CHECK(seven.status().message() ==
        "no valid configuration of 7 GPUs: tp must divide heads (4), query_groups (4) and ffn (256) and be at most 4 "
        "(GPUs per node), pp at most 4 (layers), and dp = gpus / (tp x pp) must divide global_batch (8)");

  // 1/4096 GiB = 256 KiB per GPU: the least memory is tp=4, pp=2, dp=1, micro_batch=1.
  ModelSpec tiny = m;
  tiny.gpu.memory_gb = 1.0 / 4096;
  const MemoryEstimate least = estimate_memory(tiny, {4, 2, 1, 1});
  for (const auto& c : valid_configs(tiny, 8)) CHECK(estimate_memory(tiny, c).total() >= least.total());
  auto none = plan_parallelism(tiny, 8);
  REQUIRE_FALSE(none.is_ok());
  INFO(none.status().message());
  CHECK_THAT(none.status().message(),
             Catch::StartsWith("the model (218496 parameters) fits on no configuration of 8 GPUs of 0.00 GiB: the one "
                               "that needs the least memory, tp=4,pp=2,dp=1,micro_batch=1, needs 0.00 GiB per GPU of "
                               "stage 0"));
  CHECK_THAT(none.status().message(), Catch::EndsWith("more than a GPU has"));
}

TEST_CASE("plan ranks the configurations that fit by step time, and drops the others", "[planner]") {
  ModelSpec m = small_model();
  // 1 MiB per GPU: some configurations of 8 GPUs fit, others do not.
  m.gpu.memory_gb = 1.0 / 1024;
  auto r = plan_parallelism(m, 8);
  REQUIRE(r.is_ok());
  const auto& plan = *r;
  size_t fitting = 0;
  for (const auto& c : valid_configs(m, 8)) fitting += fits(m, estimate_memory(m, c)) ? 1 : 0;
  CHECK(plan.size() == fitting);
  CHECK(fitting > 0);
  CHECK(fitting < valid_configs(m, 8).size());
  for (size_t i = 0; i + 1 < plan.size(); ++i) CHECK(better(plan[i], plan[i + 1]));
  for (const auto& c : plan) {
    CHECK(c.memory_gb() <= m.gpu.memory_gb);
    CHECK(c.tflops_per_gpu() == c.step.flops / (8 * c.step_seconds()) / 1e12);
  }
}

TEST_CASE("with one stage a larger micro-batch fills more of the GPU: faster, and more memory", "[planner]") {
  // pp = 1: no bubble; a larger micro-batch makes every GEMM larger (more waves of tiles,
  // gemm_seconds) and keeps more activations.
  const ModelSpec m = small_model();
  const Candidate b1 = evaluate(m, {2, 1, 4, 1});
  const Candidate b2 = evaluate(m, {2, 1, 4, 2});
  CHECK(b2.step.compute < b1.step.compute);
  CHECK(b2.step.total() < b1.step.total());
  CHECK(b1.memory.total() < b2.memory.total());
  CHECK(better(b2, b1));
}

TEST_CASE("the planner equals exhaustive search under the same model on random small cases", "[planner]") {
  std::mt19937 rng(20261124);
  const auto pick = [&](std::initializer_list<int64_t> xs) {
    return *(xs.begin() + std::uniform_int_distribution<size_t>(0, xs.size() - 1)(rng));
  };
  int compared = 0, planned = 0;
  for (int round = 0; round < 300; ++round) {
    ModelSpec m;
    m.layers = pick({1, 2, 3, 4, 6, 8});
    m.heads = pick({1, 2, 3, 4, 6, 8});
    m.hidden = m.heads * pick({2, 4, 8});
    m.query_groups = m.heads / pick({1, 1, 2});
    if (m.query_groups == 0 || m.heads % m.query_groups) m.query_groups = m.heads;
    m.ffn = m.hidden * pick({1, 2, 3, 4});
    m.vocab = pick({1, 100, 256, 500});
    m.seq = pick({1, 8, 16, 32});
    m.global_batch = pick({1, 2, 4, 6, 8, 12, 16});
    m.dtype = static_cast<Precision>(pick({0, 1, 2}));
    m.recompute = static_cast<Recompute>(pick({0, 1, 2}));
    m.sequence_parallel = pick({0, 1}) == 1;
    m.distributed_optimizer = pick({0, 1}) == 1;
    m.mlp = static_cast<Mlp>(pick({0, 1}));
    m.tied_embeddings = pick({0, 1}) == 1;
    m.flash_attention = pick({0, 1}) == 1;
    m.dropout = pick({0, 1}) == 1;
    m.interleave = pick({0, 1, 1}) == 1;
    m.overlap_grad_reduce = pick({0, 1}) == 1;
    m.overlap_p2p_comm = pick({0, 1}) == 1;
    m.overlap_param_gather = pick({0, 1}) == 1;
    m.grad_reduce_in_bf16 = m.dtype == Precision::kBF16 && pick({0, 1}) == 1;
    m.context_parallel = pick({0, 1}) == 1;
    m.pipeline_split = static_cast<PipelineSplit>(pick({0, 1}));
    m.gpu = {pick({1, 4, 16, 64}) / 65536.0,       static_cast<double>(pick({1, 100})),
             static_cast<int>(pick({1, 2, 4, 8})), static_cast<double>(pick({100, 2400})),
             static_cast<double>(pick({10, 200})), static_cast<int>(pick({1, 108})),
             static_cast<double>(pick({1, 2039}))};
    const int gpus = static_cast<int>(pick({1, 2, 3, 4, 6, 8, 12, 16}));
    INFO("round " << round << ": " << gpus << " GPUs, layers " << m.layers << ", heads " << m.heads << ", batch "
                  << m.global_batch << ", memory " << m.gpu.memory_gb);
    const std::vector<Candidate> want = exhaustive(m, gpus);
    auto got = plan_parallelism(m, gpus);
    if (want.empty()) {
      CHECK_FALSE(got.is_ok());
      continue;
    }
    REQUIRE(got.is_ok());
    REQUIRE(got->size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK((*got)[i].config == want[i].config);
      CHECK(validate_config(m, (*got)[i].config).is_ok());
      CHECK((*got)[i].step.total() == want[i].step.total());
      CHECK((*got)[i].memory.total() == want[i].memory.total());
    }
    ++compared;
    planned += want.size() > 1 ? 1 : 0;
  }
  // The random cases must exercise both outcomes.
  CHECK(compared > 100);
  CHECK(planned > 50);
}
