#include "ptc/formats/export_manifest.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ptc/base/json_util.h"

namespace ptcfs::formats {

using nlohmann::json;

const ExportFile* ExportManifest::find(std::string_view name) const {
  for (const auto& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

json to_json(const ExportFile& f) {
  return json{{"name", f.name}, {"size", f.size}, {"xxh3", fmt::format("{:016x}", f.xxh3)}};
}

Result<ExportFile> export_file_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return invalid(where + ": a file entry is not an object");
  ExportFile f;
  PTC_ASSIGN_OR_RETURN(f.name, member_string(j, "name", where));
  PTC_ASSIGN_OR_RETURN(f.size, member_u64(j, "size", where));
  PTC_ASSIGN_OR_RETURN(const std::string hex, member_string(j, "xxh3", where));
  if (f.name.empty() || f.name == "." || f.name == ".." || f.name.find('/') != std::string::npos)
    return invalid(where + ": file name '" + f.name + "' is not a plain name");
  auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), f.xxh3, 16);
  if (hex.size() != 16 || ec != std::errc() || end != hex.data() + hex.size())
    return invalid(where + ": '" + f.name + "' has a bad xxh3 '" + hex + "'");
  return f;
}

std::string export_manifest_text(const ExportManifest& m) {
  json files = json::array();
  for (const auto& f : m.files) files.push_back(to_json(f));
  json j{{"format", "ptcfs-export/1"}, {"files", std::move(files)}};
  if (m.version) j["version"] = m.version;
  if (!m.origin.empty()) j["origin"] = m.origin;
  return j.dump(1) + "\n";
}

Result<ExportManifest> parse_export_manifest(std::string_view text, const std::string& where) {
  const json j = json::parse(text, nullptr, false);
  // (json::value would throw on a "format" of another type: every member's type is checked first.)
  if (j.is_discarded() || !j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != "ptcfs-export/1" || !j.contains("files") || !j["files"].is_array())
    return invalid(where + ": not a ptcfs-export/1 manifest");
  ExportManifest m;
  PTC_ASSIGN_OR_RETURN(m.version, member_u64_or(j, "version", 0, where));
  PTC_ASSIGN_OR_RETURN(m.origin, member_string_or(j, "origin", "", where));
  std::set<std::string> seen;
  for (const auto& e : j["files"]) {
    PTC_ASSIGN_OR_RETURN(ExportFile f, export_file_from_json(e, where));
    if (!seen.insert(f.name).second) return invalid(where + ": file '" + f.name + "' is listed twice");
    m.files.push_back(std::move(f));
  }
  std::sort(m.files.begin(), m.files.end(), [](const ExportFile& a, const ExportFile& b) { return a.name < b.name; });
  return m;
}

}  // namespace ptcfs::formats
