// A new version of a step built beside the current one and not yet visible: its blobs are
// pending (garbage collection leaves them alone) and it holds the claims of the names it
// changes (Store::claim: a new step's, a changed step's, new datasets') until it is committed
// or aborted. A cluster prepares on every node, then commits everywhere (two-phase); one
// node prepares and commits at once.
//
// A PreparedChange is move-only. One destroyed while still prepared (neither committed nor
// aborted) aborts itself: its new blobs are removed and its claims released; a moved-from
// change holds nothing and does nothing. A change kept for a restart (`kept`,
// daemon/store/prepared_record.h) leaves its blobs when destroyed: its record holds them for
// the next run. The store must outlive every change that holds blobs or claims.
// Not thread-safe: one owner at a time (a request, the peer service's table of transactions).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/store/store.h"

namespace ptcfs {

struct PreparedChange {
  PreparedChange() = default;
  // A change whose new blobs (if any) are in `store`.
  explicit PreparedChange(Store& store) : store(&store) {}
  PreparedChange(PreparedChange&& o) noexcept;
  // Aborts what this change held first, then takes `o`'s.
  PreparedChange& operator=(PreparedChange&& o) noexcept;
  PreparedChange(const PreparedChange&) = delete;
  PreparedChange& operator=(const PreparedChange&) = delete;
  ~PreparedChange();

  // Claims `name` (Store::claim) and holds the claim until the change is committed or aborted.
  Status claim(Store& store, Claim::Kind kind, const std::string& job, const std::string& name);
  // Claims every dataset `datasets` changes (kChangeDataset), so that no other change of one is
  // prepared on this node until this one is committed or aborted, then checks that each is
  // still the version it replaces (kFailedPrecondition naming it when one changed meanwhile).
  // A change of datasets on a cluster is decided for every node at once: two such changes
  // prepared side by side could commit in different orders on different nodes.
  Status claim_datasets(Store& store);
  bool claims_new_dataset() const;

  Store* store = nullptr;                       // where `blobs` are; set by claim() too
  std::shared_ptr<StepVersion> next;            // null for a change of datasets alone
  std::shared_ptr<const StepVersion> replaced;  // null for an import
  std::vector<DatasetChange> datasets;          // committed in the same write
  std::vector<Claim> claims;                    // released at commit or abort
  std::vector<uint64_t> blobs;                  // new, synced, pending
  uint64_t bytes_received = 0;                  // from peers
  // `ptcfs rm`: the change removes `replaced` (next is null); prepared under a kChangeStep claim.
  bool removes_step = false;
  // Recorded for a restart (keep_prepared, restore_prepared): destroyed undecided, its blobs stay.
  bool kept = false;
  // The identity `next` is committed with (StepVersion::origin): on a cluster, the transaction
  // every node commits it under; empty on one node, where commit_change draws a new one.
  std::string origin;
  // `next` is another node's version taken as it is (a catch-up): an empty origin stays empty (the
  // other nodes have none either), never drawn.
  bool as_peers = false;
};

// A removal of the current version of a step: claims it as changing (a repartition of it is
// refused meanwhile); commit_change removes it. kNotFound when there is no such step.
Result<PreparedChange> prepare_removal(Store& store, const std::string& job, const std::string& step);

// "step J/S version V" or "dataset J/N version V", for logs.
std::string describe(const PreparedChange& change);
// The one commit path of every change (import, repartition, dataset changes, on one node
// or as a cluster's second phase), and the only caller of Store::commit and
// Store::remove_step: gives the new version its origin, syncs the blob folder, commits the new
// version (and dataset versions)
// in one metadata write, releases the claims, drops the change's hold on the replaced
// versions and collects the blobs nobody uses any more. On error the change is aborted.
Status commit_change(Store& store, PreparedChange& change);
// Removes the new blobs and releases the claims; the current version stays as it was.
void abort_change(Store& store, PreparedChange& change);
// Removes the new blobs only (the claims stay).
void abort_blobs(Store& store, PreparedChange& change);

}  // namespace ptcfs
