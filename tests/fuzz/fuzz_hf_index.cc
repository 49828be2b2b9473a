// model.safetensors.index.json against a directory of two shard files.
#include "ptc/formats/hf_checkpoint.h"
#include "ptc/formats/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

ptcfs::formats::SafetensorsHeader header(const std::string& json) {
  std::string file(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  file += json;
  file.append(32, '\0');  // the data area holds exactly the tensor's bytes
  return ptcfs::formats::parse_safetensors(file, file.size(), "shard").value();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<ptcfs::formats::HfFile> files = {
      {"model-00001-of-00002.safetensors",
       header(R"({"a.weight":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}})")},
      {"model-00002-of-00002.safetensors", header(R"({"b.weight":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})")},
  };
  static const std::vector<std::string> listing = {"config.json", files[0].name, files[1].name,
                                                   "model.safetensors.index.json"};
  const std::string index(ptcfs::fuzz::view(data, size));
  (void)ptcfs::formats::hf_file_names(listing, index, "dir");
  (void)ptcfs::formats::hf_tensors(files, index, "dir");
  return 0;
}
