// `ptcfs import s3://BUCKET/PREFIX --format dcp` (docs/OPERATIONS.md "The S3 tier"): a folder written
// by stock `dcp.save` (`.metadata` and `*.distcp`), brought in through the save path exactly as a
// stock `dcp.save` into the mount writes it (docs/FORMATS.md "Stock dcp.save into the mount"): each
// `.distcp` object is copied into a file of the pending step with ranged reads, then `.metadata` as
// `.metadata.tmp`, renamed to `.metadata`, which checks every chunk and reference, converts the save
// into the step's tensors and commits it. Nothing in the folder is run; a refusal removes the
// pending step, so the store is as it was.
//
// Only stock DCP folders: a folder with any other file (Megatron-Core's common.pt and
// metadata.json, an HF storage writer's safetensors) is refused naming it, before anything is
// written; those import from a local folder (the Python importer, docs/FORMATS.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "daemon/reshard/source_dir.h"
#include "fs/content.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct DcpImportSummary {
  size_t files = 0;    // .distcp files copied
  uint64_t bytes = 0;  // their bytes and .metadata's
  double seconds = 0;
};

// `progress(done, total)`: bytes copied of all files. `remove(job, step)` removes the pending step
// after a refusal (SaveService::remove).
Result<DcpImportSummary> import_dcp_folder(fs::WriteTarget& target, SourceDir& src, const std::string& job,
                                           const std::string& step,
                                           const std::function<Status(const std::string&, const std::string&)>& remove,
                                           const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace ptcfs
