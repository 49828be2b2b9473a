// ptcfs-export.json (docs/FORMATS.md "ptcfs-export.json"): the manifest `ptcfs export` and the
// write-through S3 tier leave beside a step's rank files: each file's size and XXH3-64 (16 hex
// digits), so that `ptcfs import` refuses a file changed or cut since. One codec for its writers
// (cli/export_s3.cc, daemon/durable/) and its reader (daemon/reshard/importer.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ptc/base/status.h"

namespace ptcfs::formats {

inline constexpr const char* kExportManifest = "ptcfs-export.json";

struct ExportFile {
  std::string name;  // a plain file name
  uint64_t size = 0, xxh3 = 0;
  bool operator==(const ExportFile&) const = default;
};

struct ExportManifest {
  uint64_t version = 0;           // of the step the files were cut from (0: not stated; `ptcfs export` states none)
  std::string origin;             // that version's identity (the S3 tier's; empty: not stated)
  std::vector<ExportFile> files;  // sorted by name
  const ExportFile* find(std::string_view name) const;
};

// {"name", "size", "xxh3": "<16 hex digits>"}
nlohmann::json to_json(const ExportFile& f);
// `where` names the object or file in errors.
Result<ExportFile> export_file_from_json(const nlohmann::json& j, const std::string& where);

std::string export_manifest_text(const ExportManifest& m);
// Refuses another format, a file listed twice, a name that is not plain, a bad digest.
Result<ExportManifest> parse_export_manifest(std::string_view text, const std::string& where);

}  // namespace ptcfs::formats
