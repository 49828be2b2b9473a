// The Hugging Face view of a step (docs/FORMATS.md "The Hugging Face view"): for a step whose
// PTC carries the model's config.json (Ptc::hf_config: an HF import, or a save_pretrained into
// the mount), MNT/<job>/<step>/hf/ is a folder that stock transformers' from_pretrained loads,
// generated from the current layout, no byte copied:
//
//   config.json                        the stored config, two-space indented
//   model.safetensors.index.json       metadata.total_size and the weight_map
//   model-0000k-of-0000n.safetensors   the whole tensors (padding removed) in name order, a new
//                                      file when the next tensor would pass the shard size; each
//                                      tensor read through its full view (fs/views.h)
//
// Tensors with reserved names (__dcp__/...) are left out. A step without hf_config has no hf/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fs/content.h"
#include "fs/views.h"

namespace ptcfs::fs {

inline constexpr const char* kHfDir = "hf";
// Hugging Face's own default shard size (transformers' save_pretrained before v5).
inline constexpr uint64_t kDefaultHfShardBytes = 5'000'000'000;

// Every file of the step's hf/ folder, by name; none when the step has no hf_config.
std::vector<std::pair<std::string, std::shared_ptr<const View>>> hf_views(const std::shared_ptr<const StepContent>& c,
                                                                          uint64_t shard_bytes);

}  // namespace ptcfs::fs
