// A Megatron .idx file; the first 8 bytes of the input are its .bin's size.
#include <cstring>

#include "ptc/formats/mmidx.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t bin_size = 0;
  std::memcpy(&bin_size, data, 8);
  auto idx = ptcfs::formats::parse_mmidx(ptcfs::fuzz::view(data + 8, size - 8), bin_size, "fuzz.idx");
  if (!idx) return 0;
  for (size_t i = 0; i < idx->offsets.size(); ++i)
    if (idx->offsets[i] + idx->bytes[i] > bin_size) __builtin_trap();  // accepted sequences lie in .bin
  return 0;
}
