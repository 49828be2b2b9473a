// The JSON files users write for the CLI and the daemon, cluster.json and MODEL.json, and a
// Hugging Face checkpoint's config.json (the input's first byte picks which: 0 MODEL.json,
// 1 cluster.json, 2 config.json, and so on modulo 3).
#include "ptc/cluster.h"
#include "ptc/formats/hf_config.h"
#include "ptc/planner/model_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto text = ptcfs::fuzz::view(data + 1, size - 1);
  if (data[0] % 3 == 1) {
    auto c = ptcfs::ptc::parse_cluster_json(text, "cluster.json");
    if (c) (void)c->total_gpus();
  } else if (data[0] % 3 == 2) {
    auto c = ptcfs::formats::parse_hf_config(text, "config.json");
    if (c)
      for (const char* e :
           {"num_attention_heads*head_dim", "num_key_value_heads*head_dim*hidden_size", "3*hidden_size"})
        (void)ptcfs::formats::eval_config_product(*c, e, "fuzz");
  } else {
    (void)ptcfs::planner::parse_model_json(text, "model.json");
  }
  return 0;
}
