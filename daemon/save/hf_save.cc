#include "daemon/save/hf_save.h"

#include <nlohmann/json.hpp>

#include "ptc/formats/hf_config.h"
#include "ptc/formats/rank_file.h"
#include "ptc/layout.h"

namespace ptcfs {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool digits(const std::string& s, size_t at, size_t n) {
  if (at + n > s.size()) return false;
  for (size_t i = at; i < at + n; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// model-NNNNN-of-NNNNN.safetensors (transformers' shard names: five digits each).
bool is_shard_name(const std::string& rel) {
  return rel.size() == 32 && rel.compare(0, 6, "model-") == 0 && digits(rel, 6, 5) && rel.compare(11, 4, "-of-") == 0 &&
         digits(rel, 15, 5) && ends_with(rel, ".safetensors");
}

bool is_temporary(const std::string& rel) { return rel.size() > 4 && rel.compare(0, 4, ".tmp") == 0; }

bool is_model_file(const std::string& rel) { return rel == kHfSingleFile || is_shard_name(rel); }

}  // namespace

bool is_hf_save_file(const std::string& rel) {
  if (rel.find('/') != std::string::npos) return false;
  return rel == formats::kHfConfigFile || rel == "generation_config.json" || rel == kHfIndexFile ||
         is_model_file(rel) || is_temporary(rel);
}

bool is_hf_data_file(const std::string& rel) { return is_model_file(rel) || is_temporary(rel); }

bool is_hf_rename(const std::string& from, const std::string& to) { return is_temporary(from) && is_model_file(to); }

Result<bool> hf_save_complete(const std::map<std::string, bool>& closed, const std::optional<std::string>& index_text,
                              const std::string& where) {
  for (const auto& [name, c] : closed)
    if (!c || is_temporary(name)) return false;
  if (!closed.count(formats::kHfConfigFile)) return false;
  if (!index_text) {
    if (!closed.count(kHfSingleFile)) return false;
    for (const auto& [name, c] : closed)
      if (is_shard_name(name)) return false;  // a sharded save whose index is still to come
    return true;
  }
  nlohmann::json index = nlohmann::json::parse(*index_text, nullptr, false);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    return invalid(where + "/" + kHfIndexFile + ": not an object with a weight_map");
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string()) return invalid(where + "/" + kHfIndexFile + ": '" + tensor + "' names no file");
    if (!closed.count(file.get<std::string>())) return false;
  }
  return true;
}

Result<std::string> hf_template_for(const std::string& config_text, const std::string& where) {
  const nlohmann::json c = nlohmann::json::parse(config_text, nullptr, false);
  const std::string file = where + "/" + formats::kHfConfigFile;
  if (!c.is_object()) return invalid(file + ": not a JSON object");
  if (!c.contains("model_type") || !c["model_type"].is_string())
    return invalid(file + ": no model_type, so no template gives its tensors their partitioning");
  static const std::map<std::string, std::string> kByType = {
      {"llama", "llama"}, {"mistral", "llama"}, {"qwen2", "llama"}, {"gpt2", "gpt2"}, {"gpt_neox", "neox"}};
  const std::string type = c["model_type"].get<std::string>();
  auto it = kByType.find(type);
  if (it == kByType.end())
    return invalid(file + ": model_type '" + type +
                   "' has no shipped template (llama, mistral, qwen2, gpt2, gpt_neox do): save it into a "
                   "folder and import it with ptcfs import DIR --format hf --template FILE");
  return it->second;
}

Result<DcpSave> plan_hf_save(const formats::HfCheckpoint& ck, const formats::PtcTemplate& t, const std::string& where) {
  if (!ck.config) return invalid(where + ": no " + std::string(formats::kHfConfigFile));
  DcpSave save;
  PTC_ASSIGN_OR_RETURN(save.ptc, formats::infer_ptc(t, ck.infos(), ptc::Parallelism{}, where, &*ck.config));
  save.ptc.hf_config = ck.config->json;
  PTC_ASSIGN_OR_RETURN(const ptc::Layout layout, ptc::Layout::make(save.ptc, save.ptc.parallelism));
  PTC_ASSIGN_OR_RETURN(const formats::PaddingRanges padding, formats::layout_padding(layout));
  std::map<std::string_view, const formats::HfTensor*> by_name;
  for (const auto& ht : ck.tensors) by_name[ht.info.name] = &ht;
  const auto& slices = layout.slices(layout.shards().front());
  for (size_t j = 0; j < slices.size(); ++j) {
    const auto& spec = layout.tensor(slices[j]);
    const formats::HfTensor* ht = by_name.at(spec.name);
    const auto& file = ck.files[ht->file];
    const auto& entry = file.header.entries[ht->entry];
    DcpTensorFile f;
    f.name = spec.name;
    f.shard = 0;
    f.dtype = spec.dtype;
    f.shape = slices[j].local_shape;
    const uint64_t bytes = static_cast<uint64_t>(ptc::num_elements(f.shape)) * ptc::dtype_size(f.dtype);
    uint64_t src = file.header.data_start + entry.begin, pos = 0;
    for (const auto& [off, len] : padding[0][j]) {
      if (off > pos) f.copies.push_back({file.name, src, pos, off - pos});
      src += off - pos;
      f.zeros.push_back({off, len});
      pos = off + len;
    }
    if (bytes > pos) f.copies.push_back({file.name, src, pos, bytes - pos});
    src += bytes - pos;
    if (src != file.header.data_start + entry.end)
      return internal(where + ": tensor " + spec.name + ": the layout's slice does not hold its bytes");
    save.bytes += entry.end - entry.begin;
    save.files.push_back(std::move(f));
  }
  return save;
}

}  // namespace ptcfs
