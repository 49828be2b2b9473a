#include "ptc/planner/model_spec.h"

#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>

using namespace ptcfs;
using namespace ptcfs::planner;

namespace {

const std::string kFile = "MODEL.json";

// GPT-3 175B on A100 nodes, every optional member given.
const std::string kFull = R"({
  "layers": 96, "hidden": 12288, "heads": 96, "ffn": 49152, "vocab": 51200, "seq": 2048,
  "global_batch": 1536, "query_groups": 8, "dtype": "F16", "distributed_optimizer": true,
  "recompute": "selective", "sequence_parallel": false, "mlp": "swiglu", "tied_embeddings": false, "flash_attention": false,
  "dropout": false, "interleave": false, "pipeline_split": "embedding_and_loss", "context_parallel": true, "overlap_grad_reduce": false,
  "overlap_p2p_comm": false, "overlap_param_gather": false, "grad_reduce_in_bf16": false,
  "gpu": {"memory_gb": 80, "tflops": 312.5, "per_node": 8, "intra_node_gbps": 2400, "inter_node_gbps": 200,
          "sms": 132, "memory_bandwidth_gbs": 3350}
})";

// kFull's required members only, with `extra` spliced into the top-level object.
std::string minimal(const std::string& extra = "", const std::string& gpu_extra = "") {
  return R"({"layers": 4, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 256, "seq": 32, "global_batch": 8,)" + extra +
         R"( "gpu": {"memory_gb": 16, "tflops": 100, "per_node": 4, "intra_node_gbps": 800, "inter_node_gbps": 100)" +
         gpu_extra + "}}";
}

void expect_invalid(const std::string& text, std::initializer_list<std::string> needles) {
  INFO("document: " << text);
  auto r = parse_model_json(text, kFile);
  REQUIRE_FALSE(r.is_ok());
  INFO("message: " << r.status().message());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::StartsWith(kFile));
  for (const auto& n : needles) CHECK_THAT(r.status().message(), Catch::Contains(n));
}

}  // namespace

TEST_CASE("MODEL.json with every member is read as written", "[model_spec]") {
  auto r = parse_model_json(kFull, kFile);
  REQUIRE(r.is_ok());
  const ModelSpec& m = *r;
  CHECK(m.layers == 96);
  CHECK(m.hidden == 12288);
  CHECK(m.heads == 96);
  CHECK(m.ffn == 49152);
  CHECK(m.vocab == 51200);
  CHECK(m.seq == 2048);
  CHECK(m.global_batch == 1536);
  CHECK(m.query_groups == 8);
  CHECK(m.dtype == Precision::kF16);
  CHECK(m.distributed_optimizer);
  CHECK(m.recompute == Recompute::kSelective);
  CHECK_FALSE(m.sequence_parallel);
  CHECK(m.gpu.memory_gb == 80);
  CHECK(m.gpu.tflops == 312.5);
  CHECK(m.gpu.per_node == 8);
  CHECK(m.gpu.intra_node_gbps == 2400);
  CHECK(m.gpu.inter_node_gbps == 200);
  CHECK(m.mlp == Mlp::kSwiglu);
  CHECK_FALSE(m.tied_embeddings);
  CHECK_FALSE(m.flash_attention);
  CHECK_FALSE(m.dropout);
  CHECK_FALSE(m.interleave);
  CHECK(m.pipeline_split == PipelineSplit::kEmbeddingAndLoss);
  CHECK(m.context_parallel);
  CHECK_FALSE(m.overlap_grad_reduce);
  CHECK_FALSE(m.overlap_p2p_comm);
  CHECK_FALSE(m.overlap_param_gather);
  CHECK_FALSE(m.grad_reduce_in_bf16);
  CHECK(m.gpu.sms == 132);
  CHECK(m.gpu.memory_bandwidth_gbs == 3350);
}

TEST_CASE("MODEL.json defaults: query_groups = heads, BF16, no distributed optimizer, no recompute, sequence parallel",
          "[model_spec]") {
  auto r = parse_model_json(minimal(), kFile);
  REQUIRE(r.is_ok());
  CHECK(r->query_groups == 4);
  CHECK(r->dtype == Precision::kBF16);
  CHECK_FALSE(r->distributed_optimizer);
  CHECK(r->recompute == Recompute::kNone);
  CHECK(r->sequence_parallel);
  // GeLU, tied embeddings, FlashAttention, dropout, interleaving allowed, the even split, the overlaps on (as current
  // Megatron-LM is run), an A100's 108 SMs and 2,039 GB/s.
  CHECK(r->mlp == Mlp::kGelu);
  CHECK(r->tied_embeddings);
  CHECK(r->flash_attention);
  CHECK(r->dropout);
  CHECK(r->interleave);
  CHECK(r->pipeline_split == PipelineSplit::kEven);
  CHECK_FALSE(r->context_parallel);
  CHECK(r->overlap_grad_reduce);
  CHECK(r->overlap_p2p_comm);
  CHECK(r->overlap_param_gather);
  CHECK_FALSE(r->grad_reduce_in_bf16);
  CHECK(r->gpu.sms == 108);
  CHECK(r->gpu.memory_bandwidth_gbs == 2039);
}

TEST_CASE("MODEL.json: unknown keys are refused, naming the key", "[model_spec]") {
  expect_invalid(minimal(R"( "layer": 4,)"), {"unknown key 'layer'", "allowed: layers"});
  expect_invalid(minimal("", R"(, "mem_gb": 4)"), {"gpu: unknown key 'mem_gb'"});
}

TEST_CASE("MODEL.json: missing members are named", "[model_spec]") {
  expect_invalid(R"({"hidden": 64, "heads": 4, "ffn": 256, "vocab": 256, "seq": 32, "global_batch": 8, "gpu": {}})",
                 {"lacks 'layers'"});
  expect_invalid(R"({"layers": 4, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 256, "seq": 32, "global_batch": 8})",
                 {"lacks 'gpu'"});
  expect_invalid(R"({"layers": 4, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 256, "seq": 32, "global_batch": 8,
                     "gpu": {"memory_gb": 16, "tflops": 100, "per_node": 4, "intra_node_gbps": 800}})",
                 {"gpu lacks 'inter_node_gbps'"});
}

TEST_CASE("MODEL.json: values of the wrong type or range are refused, naming the member", "[model_spec]") {
  expect_invalid(
      R"({"layers": 0, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 256, "seq": 32, "global_batch": 8, "gpu": {}})",
      {"layers: 0 is outside [1, 65536]"});
  expect_invalid(
      R"({"layers": 2.5, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 256, "seq": 32, "global_batch": 8, "gpu": {}})",
      {"layers: expected an integer, got 2.5"});
  expect_invalid(minimal(R"( "dtype": "FP8",)"), {"dtype 'FP8' is not one of BF16, F16, F32"});
  expect_invalid(minimal(R"( "recompute": "some",)"), {"recompute 'some' is not one of none, selective, full"});
  expect_invalid(minimal(R"( "distributed_optimizer": 1,)"), {"field 'distributed_optimizer' must be true or false"});
  expect_invalid(minimal(R"( "query_groups": 3,)"), {"heads (4) is not a multiple of query_groups (3)"});
  expect_invalid(minimal(R"( "mlp": "relu",)"), {"mlp 'relu' is not one of gelu, swiglu"});
  expect_invalid(minimal(R"( "mlp": 1,)"), {"mlp"});
  expect_invalid(minimal(R"( "dtype": "F16", "grad_reduce_in_bf16": true,)"),
                 {"grad_reduce_in_bf16 needs dtype BF16, got F16"});
  CHECK(parse_model_json(minimal(R"( "grad_reduce_in_bf16": true,)"), kFile)->grad_reduce_in_bf16);
  expect_invalid(minimal(R"( "pipeline_split": "uneven",)"),
                 {"pipeline_split 'uneven' is not one of even, embedding_and_loss"});
  for (const char* key : {"tied_embeddings", "flash_attention", "dropout", "interleave", "overlap_grad_reduce",
                          "overlap_p2p_comm", "overlap_param_gather", "grad_reduce_in_bf16", "context_parallel"})
    expect_invalid(minimal(std::string(" \"") + key + "\": \"yes\","),
                   {std::string("field '") + key + "' must be true or false"});
  expect_invalid(minimal("", R"(, "sms": 0)"), {"gpu: sms: 0 is outside [1, 65536]"});
  expect_invalid(minimal("", R"(, "memory_bandwidth_gbs": -1)"), {"gpu: memory_bandwidth_gbs: must be greater than 0"});
  expect_invalid(minimal("", R"(, "tflops": 0)"), {"duplicate key 'tflops'"});
  expect_invalid(R"({"layers": 4, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 256, "seq": 32, "global_batch": 8,
                     "gpu": {"memory_gb": -1, "tflops": 100, "per_node": 4, "intra_node_gbps": 800, "inter_node_gbps": 100}})",
                 {"gpu: memory_gb: must be greater than 0, got -1"});
  expect_invalid(R"({"layers": 4, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 256, "seq": 32, "global_batch": 8,
                     "gpu": {"memory_gb": 16, "tflops": "fast", "per_node": 4, "intra_node_gbps": 800, "inter_node_gbps": 100}})",
                 {"gpu: tflops: expected a number, got \"fast\""});
  expect_invalid(R"({"layers": 4, "hidden": 66, "heads": 4, "ffn": 256, "vocab": 256, "seq": 32, "global_batch": 8,
                     "gpu": {"memory_gb": 16, "tflops": 100, "per_node": 4, "intra_node_gbps": 800, "inter_node_gbps": 100}})",
                 {"hidden (66) is not a multiple of heads (4)"});
  expect_invalid("[1, 2]", {"expected a JSON object"});
  expect_invalid("{", {"not valid JSON"});
}
