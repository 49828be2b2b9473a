// A Hugging Face checkpoint directory (docs/FORMATS.md "Hugging Face checkpoints"): either
// one `model.safetensors`, or shards `model-0000k-of-0000n.safetensors` listed by
// `model.safetensors.index.json` ({"metadata": {...}, "weight_map": {tensor: file}}).
// Tensors hold their full logical shapes under the model's own names. Pure: the callers
// read the listing, the index and the files' headers, and hand them here.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ptc/formats/hf_config.h"
#include "ptc/formats/ptc_template.h"
#include "ptc/formats/safetensors.h"

namespace ptcfs::formats {

inline constexpr char kHfSingleFile[] = "model.safetensors";
inline constexpr char kHfIndexFile[] = "model.safetensors.index.json";

// The files to read, in order: the index's files (sorted, each once) when `index_text` is
// given, else model.safetensors, which must then be in `listing`. Names are plain file names
// in `dir` (no '/', no "..": an index cannot point outside it).
Result<std::vector<std::string>> hf_file_names(const std::vector<std::string>& listing,
                                               const std::optional<std::string>& index_text, const std::string& dir);

struct HfFile {
  std::string name;  // in the directory
  SafetensorsHeader header;
};

struct HfTensor {
  TensorInfo info;
  size_t file = 0;   // index into the files
  size_t entry = 0;  // index into that file's header entries
};

// Every tensor of the files, sorted by name. A tensor in two files is refused; with an index,
// a tensor the index names in another file (or not at all), or an index entry naming a
// tensor no file holds, is refused. Errors name the file and tensor.
Result<std::vector<HfTensor>> hf_tensors(const std::vector<HfFile>& files, const std::optional<std::string>& index_text,
                                         const std::string& dir);

// The reads of a checkpoint directory, done by the caller (ptc does no I/O).
struct HfReader {
  std::function<Result<std::vector<std::string>>()> list;                         // the file names in it
  std::function<Result<std::string>(const std::string& name)> read_text;          // a small file (the index)
  std::function<Result<SafetensorsHeader>(const std::string& name)> read_header;  // a file's header
};

struct HfCheckpoint {
  std::vector<HfFile> files;
  std::vector<HfTensor> tensors;   // sorted by name
  std::optional<HfConfig> config;  // config.json, when the directory has one
  std::vector<TensorInfo> infos() const;
};

// The directory's files (headers read once each) and tensors, checked against each other:
// hf_file_names, then every header, then hf_tensors; and config.json, when there, parsed.
Result<HfCheckpoint> read_hf_checkpoint(const std::string& dir, const HfReader& io);

}  // namespace ptcfs::formats
