// A rank file: the safetensors header of the whole input (its size is the file's size).
#include "ptc/formats/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto in = ptcfs::fuzz::view(data, size);
  auto h = ptcfs::formats::parse_safetensors(in, size, "fuzz.safetensors");
  if (!h) return 0;
  uint64_t total = 0;
  for (const auto& e : h->entries) total += e.end - e.begin;  // accepted ranges lie in the file
  if (total > size) __builtin_trap();
  return 0;
}
