// Stock Hugging Face save_pretrained into the mount (docs/FORMATS.md "save_pretrained into the
// mount"): model.save_pretrained("MNT/<job>/<step>") writes config.json, generation_config.json,
// each safetensors file as a hidden temporary (.tmpXXXXXX: made, sized with ftruncate, written
// front to back, renamed to its name while open, closed) and, when sharded,
// model.safetensors.index.json last. The files are staged as they come (daemon/save/staged_file.h);
// when the last of a complete save closes, the save becomes the step's tensors in the unsharded
// layout (tp=1, pp=1, dp=1), partitioned by the shipped template of the config's model_type,
// with config.json kept as ptc.json's hf_config, and commits before that close returns.
//
// The rules here are pure: which names belong to such a save, when it is complete, which
// template a config names, and the plan of copies (as a DCP save's, daemon/save/dcp_save.h, so
// that the same writer writes it).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "daemon/save/dcp_save.h"
#include "ptc/base/status.h"
#include "ptc/formats/hf_checkpoint.h"
#include "ptc/formats/ptc_template.h"

namespace ptcfs {

inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";
inline constexpr const char* kHfSingleFile = "model.safetensors";

// A name save_pretrained writes in the step's folder: config.json, generation_config.json, the
// index, model.safetensors, model-NNNNN-of-NNNNN.safetensors, or a .tmp* temporary.
bool is_hf_save_file(const std::string& rel);
// Whether such a file's bytes go to a blob (a safetensors file or a temporary) rather than memory.
bool is_hf_data_file(const std::string& rel);
// Whether `from` -> `to` is the rename of a temporary to the safetensors name it was written for.
bool is_hf_rename(const std::string& from, const std::string& to);

// Whether the staged files (name -> closed) are a whole save: config.json, and model.safetensors
// alone, or the index (whose text is `index_text`) with every file its weight_map names; every file
// closed and no temporary left. A malformed index is kInvalidArgument.
Result<bool> hf_save_complete(const std::map<std::string, bool>& closed, const std::optional<std::string>& index_text,
                              const std::string& where);

// The shipped template for a config.json's model_type (llama, mistral, qwen2: "llama"; gpt2;
// gpt_neox: "neox"); kInvalidArgument naming the model_type and what to do otherwise.
Result<std::string> hf_template_for(const std::string& config_text, const std::string& where);

// The step a checkpoint's tensors make at tp=1, pp=1, dp=1 under template `t`: one tensor file per
// tensor, copied from its safetensors file with the template's padding as zeros; ptc.json's
// hf_config is the checkpoint's config.json (which the checkpoint must have).
Result<DcpSave> plan_hf_save(const formats::HfCheckpoint& ck, const formats::PtcTemplate& t, const std::string& where);

}  // namespace ptcfs
