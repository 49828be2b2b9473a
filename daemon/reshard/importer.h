// Import of a checkpoint directory (docs/FORMATS.md "ptc.json"), local or an S3 prefix
// (daemon/reshard/source_dir.h), into the store.
//
// All or nothing: every file is validated (ptc.json, the set of rank files, every header,
// every slice's dtype and shape) before a byte is copied; the data is then copied into new
// blobs, synced, and the step is committed in one metadata write. On any error the new
// blobs are removed and the store is as it was.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "daemon/reshard/source_dir.h"
#include "daemon/store/prepared.h"
#include "daemon/store/store.h"

namespace ptcfs {

struct ImportSummary {
  std::string job, step;
  size_t shards = 0, tensors = 0;
  uint64_t bytes = 0;  // tensor data copied
  double seconds = 0;
};

// Called with bytes copied so far and the total, from any thread, never concurrently.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

Result<ImportSummary> import_checkpoint(Store& store, SourceDir& src, const std::string& job, const std::string& step,
                                        const ProgressFn& progress = {});

// The same from a local directory (an absolute path).
Result<ImportSummary> import_checkpoint(Store& store, const std::string& dir, const std::string& job,
                                        const std::string& step, const ProgressFn& progress = {});

// Where the shards of a layout go: which this node holds. Called once ptc.json is read.
using PlaceFn = std::function<Result<StepPlacement>(const ptc::Layout&)>;

// The first phase of an import on a cluster node: validates ptc.json and the rank files of
// the shards `place` gives this node (other shards' files may be absent; present ones
// are not read), copies them into pending blobs and claims the name (Store::claim, first:
// an invalid, reserved or taken name is refused before any file is read). Commit or abort
// the change (daemon/store/prepared.h); nothing is visible before.
Result<PreparedChange> prepare_import(Store& store, SourceDir& src, const std::string& job, const std::string& step,
                                      const PlaceFn& place, ImportSummary& summary, const ProgressFn& progress = {});

Result<PreparedChange> prepare_import(Store& store, const std::string& dir, const std::string& job,
                                      const std::string& step, const PlaceFn& place, ImportSummary& summary,
                                      const ProgressFn& progress = {});

// Shared by the importers (this one and hf_import.h).
//
// Runs copy(i, blobs, advance) for i in [0, n) in parallel: each copies one source into new
// blobs (added to its `blobs`, finished or not) and counts its bytes with advance(n), which
// reports progress against `total`. The ids of every blob made go to `made`; on the first
// error they are removed and the error returned.
using CopyFn =
    std::function<Status(size_t i, std::vector<BlobWriter>& blobs, const std::function<void(uint64_t)>& advance)>;
Status copy_in_parallel(Store& store, size_t n, uint64_t total, const ProgressFn& progress, const CopyFn& copy,
                        std::vector<uint64_t>& made);

}  // namespace ptcfs
