// A new version of a step built beside the current one and not yet visible: its blobs are
// pending (garbage collection leaves them alone) and the step is reserved (an import) or
// marked as changing (a repartition) until the change is committed or aborted. A cluster
// prepares on every node, then commits everywhere (two-phase); one node prepares and
// commits at once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/store/store.h"

namespace ptcfs {

struct PreparedChange {
  std::shared_ptr<StepVersion> next;            // null for a change of datasets alone
  std::shared_ptr<const StepVersion> replaced;  // null for an import
  std::vector<DatasetChange> datasets;          // committed in the same write
  // Dataset names reserved for an add (released at commit or abort).
  std::vector<std::pair<std::string, std::string>> reserved_datasets;
  std::vector<uint64_t> blobs;                  // new, synced, pending
  uint64_t bytes_received = 0;                  // from peers
  // `ptcfs rm`: the change removes `replaced` (next is null); prepared under begin_change.
  bool removes_step = false;
};

// A removal of the current version of a step: marks it as changing (a repartition of it is
// refused meanwhile); commit_change removes it. kNotFound when there is no such step.
ptc::Result<PreparedChange> prepare_removal(Store& store, const std::string& job, const std::string& step);

// "step J/S version V" or "dataset J/N version V", for logs.
std::string describe(const PreparedChange& change);
// The one commit path of every change (import, repartition, dataset changes, on one node
// or as a cluster's second phase): syncs the blob folder, commits the new version (and
// dataset versions) in one metadata write, releases the step and the dataset names, drops
// the change's hold on the replaced versions and collects the blobs nobody uses any more.
// On error the change is aborted.
ptc::Status commit_change(Store& store, PreparedChange& change);
// Removes the new blobs and releases the step; the current version stays as it was.
void abort_change(Store& store, PreparedChange& change);
// Removes the new blobs only (the step stays reserved or changing).
void abort_blobs(Store& store, PreparedChange& change);

}  // namespace ptcfs
