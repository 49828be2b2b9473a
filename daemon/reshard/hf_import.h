// Import of a Hugging Face safetensors checkpoint (ptc/formats/hf_checkpoint.h) with a PTC template
// (ptc/formats/ptc_template.h): the template gives every tensor its partitioning, the step is stored
// in the unsharded layout (tp=1, pp=1, dp=1), and a repartition then gives any
// configuration without copying (the caller's `--to`).
//
// `src` is a local folder or an S3 prefix (daemon/reshard/source_dir.h): each file's header is
// read once (from S3: ranged GETs) and its tensors' bytes are copied once, into one blob per
// file, hashed on the way; vocabulary padding (pad_to) is written as zeros. All or nothing,
// like import_checkpoint: every header is checked and the PTC inferred before a byte is
// copied, and on any error the new blobs are removed and the name released.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "daemon/reshard/importer.h"
#include "daemon/reshard/source_dir.h"
#include "ptc/formats/hf_checkpoint.h"

namespace ptcfs {

// `then`, when given, is the layout the caller repartitions into next: checked before a byte
// is copied, so that a shape it cannot split refuses the import instead of half-doing it.
Result<ImportSummary> import_hf(Store& store, SourceDir& src, const formats::PtcTemplate& tmpl, const std::string& job,
                                const std::string& step, const std::optional<ptc::Parallelism>& then = std::nullopt,
                                const ProgressFn& progress = {});
// A local folder.
Result<ImportSummary> import_hf(Store& store, const std::string& dir, const formats::PtcTemplate& tmpl,
                                const std::string& job, const std::string& step,
                                const std::optional<ptc::Parallelism>& then = std::nullopt,
                                const ProgressFn& progress = {});

}  // namespace ptcfs
