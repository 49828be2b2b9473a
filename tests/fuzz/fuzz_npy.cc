// A .npy file (a view the daemon also reads back when a save writes one).
#include "ptc/formats/npy.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto in = ptcfs::fuzz::view(data, size);
  auto whole = ptcfs::formats::parse_npy(in, size, "fuzz.npy");
  auto head = ptcfs::formats::parse_npy_header(in, "fuzz.npy");
  if (whole && (!head || whole->data_start > size)) __builtin_trap();  // the file check implies the header's
  return 0;
}
