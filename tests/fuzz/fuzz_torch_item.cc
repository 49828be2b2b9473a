// One item of a .distcp file (a torch.save ZIP of one tensor), read through ReadAt as the daemon
// reads it; then every byte the accepted tensor spans is touched, so a span past the item is found.
#include <string>

#include "ptc/formats/torch_item.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(ptcfs::fuzz::view(data, size));
  const ptcfs::formats::ReadAt read = [&](uint64_t off, uint64_t len) -> ptcfs::Result<std::string> {
    if (off > in.size() || len > in.size() - off) __builtin_trap();  // reads stay in the item
    return in.substr(off, len);
  };
  auto t = ptcfs::formats::read_torch_tensor_item(size, read, "fuzz.distcp");
  if (!t) return 0;
  if (t->data_offset > size || t->data_length > size - t->data_offset) __builtin_trap();
  if (ptcfs::ptc::num_elements(t->shape) == 0) return 0;
  uint64_t last = t->storage_offset;
  for (size_t d = 0; d < t->shape.size(); ++d) last += static_cast<uint64_t>(t->shape[d] - 1) * t->stride[d];
  const uint64_t end = (last + 1) * ptcfs::ptc::dtype_size(t->dtype);
  if (end > t->data_length) __builtin_trap();
  volatile char sink = in[t->data_offset + t->storage_offset * ptcfs::ptc::dtype_size(t->dtype)];
  sink = in[t->data_offset + end - 1];
  (void)sink;
  return 0;
}
