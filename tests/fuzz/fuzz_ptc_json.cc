// ptc.json, then the layout of every small config it splits over (the geometry code).
#include "ptc/layout.h"
#include "ptc/model.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto ptc = ptcfs::ptc::parse_ptc_json(ptcfs::fuzz::view(data, size), "ptc.json");
  if (!ptc) return 0;
  (void)ptcfs::ptc::ptc_to_json(*ptc);
  for (const auto& par : ptcfs::fuzz::kConfigs) {
    auto layout = ptcfs::ptc::Layout::make(*ptc, par);
    if (!layout) continue;
    uint64_t bytes = 0;
    for (const auto& shard : layout->shards())
      for (const auto& slice : layout->slices(shard)) bytes += layout->bytes(slice);
    (void)bytes;
  }
  return 0;
}
