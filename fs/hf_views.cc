#include "fs/hf_views.h"

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "fs/composed_file.h"
#include "ptc/base/log.h"
#include "ptc/formats/npy.h"
#include "ptc/formats/safetensors.h"

namespace ptcfs::fs {
namespace {

constexpr std::string_view kReserved = "__dcp__/";
constexpr const char* kIndex = "model.safetensors.index.json";

// The tensors of each file, as indices into the PTC's tensors: name order, a new file whenever the
// next tensor would pass `shard_bytes` (a larger tensor gets a file of its own), as Hugging Face
// splits.
std::vector<std::vector<size_t>> file_groups(const ptc::Ptc& ptc, uint64_t shard_bytes) {
  std::vector<std::vector<size_t>> groups(1);
  uint64_t in_group = 0;
  for (size_t i = 0; i < ptc.tensors.size(); ++i) {
    const auto& t = ptc.tensors[i];
    // Reserved names are not the model's; "__metadata__" is the safetensors header's own key (a
    // step stored before ptc::validate_tensor_names refused it).
    if (std::string_view(t.name).starts_with(kReserved) || t.name == "__metadata__") continue;
    const uint64_t n = static_cast<uint64_t>(ptc::num_elements(t.shape)) * ptc::dtype_size(t.dtype);
    if (!groups.back().empty() && in_group + n > shard_bytes) {
      groups.emplace_back();
      in_group = 0;
    }
    groups.back().push_back(i);
    in_group += n;
  }
  if (groups.back().empty()) groups.pop_back();
  return groups;
}

std::string file_name(size_t k, size_t n) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n); }

FolderFiles build_files(const std::shared_ptr<const StepContent>& c, uint64_t shard_bytes) {
  const ptc::Ptc& ptc = c->layout().ptc();
  const auto groups = file_groups(ptc, shard_bytes);
  ComposedFiles files;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total = 0;
  FolderFiles out;
  for (size_t k = 0; k < groups.size(); ++k) {
    const std::string name = file_name(k, groups.size());
    std::vector<formats::TensorDecl> decls;
    for (size_t i : groups[k]) decls.push_back({ptc.tensors[i].name, ptc.tensors[i].dtype, ptc.tensors[i].shape});
    auto layout = formats::layout_safetensors(decls, {{"format", "pt"}});
    if (!layout) {  // not for a PTC that loaded (its names are unique): an empty file, and the log says why
      log::error("hf view of {}: {}", name, layout.status().to_string());
      continue;
    }
    files.mem(name, std::move(layout->header));
    for (size_t j = 0; j < groups[k].size(); ++j) {
      const size_t i = groups[k][j];
      const auto& spec = ptc.tensors[i];
      Segment data;
      data.view = full_npy_view(c, i);
      data.src = formats::npy_header(spec.dtype, spec.shape).size();
      data.len = layout->entries[j].end - layout->entries[j].begin;
      total += data.len;
      files.add(name, std::move(data));
      weight_map[spec.name] = name;
    }
  }
  for (auto& [name, view] : files.views(c, metrics::ViewKind::kHf)) out[name] = std::move(view);
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", std::move(weight_map)}};
  out.emplace(kIndex, bytes_view(index.dump(2) + "\n"));
  out.emplace("config.json", bytes_view(nlohmann::json::parse(ptc.hf_config).dump(2) + "\n"));
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::shared_ptr<const View>>> hf_views(const std::shared_ptr<const StepContent>& c,
                                                                          uint64_t shard_bytes) {
  std::vector<std::pair<std::string, std::shared_ptr<const View>>> out;
  const ptc::Ptc& ptc = c->layout().ptc();
  if (ptc.hf_config.empty()) return out;
  const auto groups = file_groups(ptc, shard_bytes);
  auto folder = std::make_shared<const LazyFolder>([c, shard_bytes] { return build_files(c, shard_bytes); });
  out.emplace_back("config.json", lazy_folder_file(folder, "config.json", c->version(), metrics::ViewKind::kMetadata));
  out.emplace_back(kIndex, lazy_folder_file(folder, kIndex, c->version(), metrics::ViewKind::kMetadata));
  for (size_t k = 0; k < groups.size(); ++k) {
    std::string name = file_name(k, groups.size());
    out.emplace_back(name, lazy_folder_file(folder, name, c->version(), metrics::ViewKind::kHf));
  }
  return out;
}

}  // namespace ptcfs::fs
