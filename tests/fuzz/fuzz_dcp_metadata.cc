// A DCP .metadata (what a stock dcp.save writes into the mount): the pickle, its allow list and
// the checks on chunks, then the references against files of a fixed size.
#include <map>

#include "ptc/formats/dcp_reader.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto md = ptcfs::formats::parse_dcp_metadata(ptcfs::fuzz::view(data, size), "fuzz.metadata");
  if (!md) return 0;
  std::map<std::string, uint64_t> files;
  for (size_t i = 0; i < md->items.size(); ++i) {
    const ptcfs::formats::DcpItem& it = md->items[i];
    if (i > 0 && !(md->items[i - 1].fqn < it.fqn)) __builtin_trap();  // sorted, unique
    if (it.bytes) {
      if (it.chunks.size() != 1) __builtin_trap();
    } else {
      // An exact cover: the chunks' volumes add up to the tensor's.
      int64_t volume = 0;
      for (const ptcfs::formats::DcpChunk& c : it.chunks) {
        if (c.offsets.size() != it.size.size() || c.sizes.size() != it.size.size()) __builtin_trap();
        volume += ptcfs::ptc::num_elements(c.sizes);
      }
      if (volume != ptcfs::ptc::num_elements(it.size)) __builtin_trap();
    }
    for (const ptcfs::formats::DcpChunk& c : it.chunks) {
      if (c.file.empty() || c.file.find('/') != std::string::npos) __builtin_trap();
      files[c.file] = 1 << 20;
    }
  }
  (void)ptcfs::formats::check_dcp_references(*md, files, "fuzz");
  return 0;
}
