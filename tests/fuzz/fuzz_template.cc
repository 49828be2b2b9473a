// A PTC template file, then the PTC it gives a Llama-style tensor list at tp=2, pp=2, without
// and with a config.json (the rules' heads and shapes read it).
#include "ptc/formats/ptc_template.h"
#include "ptc/layout.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = ptcfs::formats::parse_template_json(ptcfs::fuzz::view(data, size), "template.json");
  if (!t) return 0;
  static const std::vector<ptcfs::formats::TensorInfo> tensors = {
      {"model.embed_tokens.weight", ptcfs::ptc::DType::BF16, {1000, 64}},
      {"model.layers.0.self_attn.q_proj.weight", ptcfs::ptc::DType::BF16, {64, 64}},
      {"model.layers.0.mlp.down_proj.weight", ptcfs::ptc::DType::BF16, {64, 128}},
      {"model.layers.1.input_layernorm.weight", ptcfs::ptc::DType::F32, {64}},
      {"model.norm.weight", ptcfs::ptc::DType::F32, {64}},
      {"lm_head.weight", ptcfs::ptc::DType::BF16, {1000, 64}},
  };
  static const ptcfs::formats::HfConfig config =
      ptcfs::formats::parse_hf_config(R"({"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "intermediate_size": 128, "vocab_size": 1000, "tie_word_embeddings": false})",
                                      "config.json")
          .value();
  for (const auto& par : ptcfs::fuzz::kConfigs) {
    (void)ptcfs::formats::infer_ptc(*t, tensors, par, "fuzz");
    if (auto p = ptcfs::formats::infer_ptc(*t, tensors, par, "fuzz", &config)) (void)ptcfs::ptc::Layout::make(*p, par);
  }
  return 0;
}
