#include "ptc/formats/hf_checkpoint.h"

#include <algorithm>
#include <map>
#include <set>

#include "ptc/base/json_util.h"

namespace ptcfs::formats {

using nlohmann::json;

namespace {

// The index's weight_map, tensor -> file, checked.
Result<std::map<std::string, std::string>> weight_map(const std::string& index_text, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(json doc, parse_json(index_text, where));
  if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object())
    return invalid(where + ": no 'weight_map' object (tensor name -> file)");
  std::map<std::string, std::string> out;
  for (const auto& [tensor, file] : doc["weight_map"].items()) {
    if (!file.is_string()) return invalid(where + ": weight_map[\"" + tensor + "\"] is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      return invalid(where + ": weight_map[\"" + tensor + "\"] names '" + f + "', not a file of the directory");
    out[tensor] = f;
  }
  if (out.empty()) return invalid(where + ": weight_map is empty");
  return out;
}

}  // namespace

Result<std::vector<std::string>> hf_file_names(const std::vector<std::string>& listing,
                                               const std::optional<std::string>& index_text, const std::string& dir) {
  if (!index_text) {
    if (std::find(listing.begin(), listing.end(), kHfSingleFile) == listing.end())
      return invalid(dir + ": no " + std::string(kHfSingleFile) + " and no " + std::string(kHfIndexFile) +
                     " (not a Hugging Face safetensors checkpoint)");
    return std::vector<std::string>{kHfSingleFile};
  }
  const std::string where = dir + "/" + kHfIndexFile;
  PTC_ASSIGN_OR_RETURN(auto map, weight_map(*index_text, where));
  std::set<std::string> files;
  for (const auto& [tensor, file] : map) files.insert(file);
  for (const auto& f : files)
    if (std::find(listing.begin(), listing.end(), f) == listing.end())
      return invalid(where + " names " + f + ", which is not in " + dir);
  // Both a single file the index does not name and the index: which holds the weights is not
  // settled (transformers' versions look for one or the other first), so neither is guessed.
  if (!files.count(kHfSingleFile) && std::find(listing.begin(), listing.end(), kHfSingleFile) != listing.end())
    return invalid(dir + ": both " + std::string(kHfSingleFile) + " and " + std::string(kHfIndexFile) +
                   ", which does not name it: which one holds the weights is unclear; remove the other");
  return std::vector<std::string>(files.begin(), files.end());
}

Result<std::vector<HfTensor>> hf_tensors(const std::vector<HfFile>& files, const std::optional<std::string>& index_text,
                                         const std::string& dir) {
  std::map<std::string, HfTensor> by_name;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto& entries = files[f].header.entries;
    for (size_t e = 0; e < entries.size(); ++e) {
      const auto& entry = entries[e];
      auto [it, added] = by_name.emplace(entry.name, HfTensor{{entry.name, entry.dtype, entry.shape}, f, e});
      if (!added)
        return invalid(dir + ": tensor " + entry.name + " is in both " + files[it->second.file].name + " and " +
                       files[f].name);
    }
  }
  if (index_text) {
    const std::string where = dir + "/" + kHfIndexFile;
    PTC_ASSIGN_OR_RETURN(auto map, weight_map(*index_text, where));
    for (const auto& [tensor, file] : map) {
      auto it = by_name.find(tensor);
      if (it == by_name.end()) return invalid(where + " names tensor " + tensor + " in " + file + ", which lacks it");
      if (files[it->second.file].name != file)
        return invalid(where + " names tensor " + tensor + " in " + file + ", but it is in " +
                       files[it->second.file].name);
    }
    for (const auto& [tensor, t] : by_name)
      if (!map.count(tensor))
        return invalid(dir + "/" + files[t.file].name + ": tensor " + tensor + " is not in " + kHfIndexFile);
  }
  std::vector<HfTensor> out;
  for (auto& [name, t] : by_name) out.push_back(std::move(t));
  return out;
}

std::vector<TensorInfo> HfCheckpoint::infos() const {
  std::vector<TensorInfo> out;
  for (const auto& t : tensors) out.push_back(t.info);
  return out;
}

Result<HfCheckpoint> read_hf_checkpoint(const std::string& dir, const HfReader& io) {
  PTC_ASSIGN_OR_RETURN(auto listing, io.list());
  std::optional<std::string> index;
  if (std::find(listing.begin(), listing.end(), kHfIndexFile) != listing.end()) {
    PTC_ASSIGN_OR_RETURN(index, io.read_text(kHfIndexFile));
  }
  HfCheckpoint ck;
  PTC_ASSIGN_OR_RETURN(auto names, hf_file_names(listing, index, dir));
  for (const auto& n : names) {
    PTC_ASSIGN_OR_RETURN(auto header, io.read_header(n));
    ck.files.push_back({n, std::move(header)});
  }
  PTC_ASSIGN_OR_RETURN(ck.tensors, hf_tensors(ck.files, index, dir));
  if (std::find(listing.begin(), listing.end(), kHfConfigFile) != listing.end()) {
    PTC_ASSIGN_OR_RETURN(std::string text, io.read_text(kHfConfigFile));
    PTC_ASSIGN_OR_RETURN(ck.config, parse_hf_config(text, dir + "/" + kHfConfigFile));
  }
  return ck;
}

}  // namespace ptcfs::formats
