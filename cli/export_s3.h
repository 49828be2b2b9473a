// `ptcfs export JOB/STEP s3://BUCKET/PREFIX` (docs/OPERATIONS.md "The S3 tier"): the step's ptc
// folder (ptc.json and its rank files, as `--format ptc` writes to a directory) as objects under
// the prefix, read from the daemon's mount. Large files go up in 64 MiB multipart parts. The
// rank files go first, then ptcfs-export.json (each file's size and XXH3-64, which `ptcfs import
// s3://...` checks), then ptc.json: a prefix whose export was cut short has no ptc.json, so it is
// never imported as a whole step. The prefix must be empty; on an error what was uploaded is
// removed again.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"
#include "ptc/formats/export_manifest.h"

namespace ptcfs::cli {

// The --s3-* flags of the CLI (each falls back to the environment, transport::resolve_s3_access).
struct S3Flags {
  std::string endpoint, region, credentials, ca_file;
};

// The name of the export's manifest in the folder (ptc/formats/export_manifest.h).
inline constexpr const char* kExportManifest = formats::kExportManifest;

Result<nlohmann::json> export_ptc_s3(const std::string& step_dir, const std::string& url, const S3Flags& flags);

// `ptcfs export JOB/STEP s3://... --format hf|dcp`: the files of one of the step's views in the mount
// (MNT/JOB/STEP/hf/ or dcp/, docs/FORMATS.md), all opened first (they keep their version), uploaded
// by name with `last` (in its order) at the end: the files a reader looks for first
// (config.json, .metadata), so that an export cut short is not taken for a whole one. The prefix
// must be empty; on an error what was uploaded is removed again.
Result<nlohmann::json> export_view_s3(const std::string& view_dir, const std::string& url, const S3Flags& flags,
                                      const std::vector<std::string>& last);

}  // namespace ptcfs::cli
