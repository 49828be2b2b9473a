// `ptcfs ls s3://BUCKET/PREFIX` (docs/OPERATIONS.md "The S3 tier"): the step copies under a prefix
// (the write-through tier's durable copies, `ptcfs export`s), what each is and whether it is whole,
// from one listing and each copy's small files (ptcfs-export.json, ptc.json): what a new cluster
// started against the bucket can import, without reading a rank file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/export_s3.h"
#include "ptc/base/status.h"
#include "ptc/formats/export_manifest.h"
#include "transport/s3_xml.h"

namespace ptcfs::cli {

// A folder of a listing holding a copy's ptc.json or manifest: its path under the prefix ("" for
// the prefix itself, else e.g. "gpt/1/"), and the objects right in it (name -> size).
struct CopyFolder {
  std::string dir;
  std::map<std::string, uint64_t> files;
};
// The folders of `objects` (their keys under `prefix`; S3Client::list gives them relative to its own
// prefix: "") that hold a ptc.json or a ptcfs-export.json, in key order; the tier's part records
// (.ptcfs-parts/) are not folders.
std::vector<CopyFolder> copy_folders(const std::vector<transport::S3Object>& objects, const std::string& prefix);

// What a copy is, from its folder and its manifest (nullopt: none):
// - "whole": ptc.json, and every file the manifest lists there at the size it states;
// - "incomplete": no ptc.json (being written, or cut short: never imported);
// - "damaged": ptc.json, but a file the manifest lists is missing or of another size (`note`);
// - "unchecked": ptc.json without a manifest (another tool's upload: import checks its headers).
// `files` and `bytes`: the manifest's, else the folder's safetensors files.
struct CopyState {
  std::string state, note;
  size_t files = 0;
  uint64_t bytes = 0;
};
CopyState copy_state(const CopyFolder& f, const std::optional<formats::ExportManifest>& m);

// {"where", "copies": [{"path", "url", "state", "note"?, "files", "bytes", "version"?, "origin"?,
// "parallelism"?}]}: every copy under the URL (version and origin when its manifest states them,
// the parallelism when its ptc.json reads).
Result<nlohmann::json> ls_s3(const std::string& url, const S3Flags& flags);

}  // namespace ptcfs::cli
