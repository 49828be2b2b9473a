// The JSON files users write for the CLI and the daemon: cluster.json and MODEL.json
// (the input's first byte picks which).
#include "ptc/cluster.h"
#include "ptc/model_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto text = ptcfs::fuzz::view(data + 1, size - 1);
  if (data[0] & 1) {
    auto c = ptc::parse_cluster_json(text, "cluster.json");
    if (c) (void)c->total_gpus();
  } else {
    (void)ptc::parse_model_json(text, "model.json");
  }
  return 0;
}
