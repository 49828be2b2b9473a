// Dataset changes on one node: add (index the files, write the sample table), progress,
// and the re-split a repartition makes. Each builds a PreparedChange (daemon/store/prepared.h),
// so a cluster prepares the same change on every node and commits it everywhere.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/dataset/dataset_index.h"
#include "daemon/store/prepared.h"
#include "daemon/store/store.h"

namespace ptcfs {

struct DatasetAddRequest {
  std::string job, name;
  ptc::DatasetFormat format = ptc::DatasetFormat::kJsonl;
  uint64_t seed = 0, global_batch = 0;
  std::optional<int> dp;  // none: the dp of the job's steps
  std::vector<std::string> files;
  bool copy = false;  // copy the files into the store instead of reading them where they are
};

// What an add did besides the dataset it made.
struct DatasetAddSummary {
  uint64_t bytes = 0;         // of the dataset's files
  uint64_t bytes_copied = 0;  // copied into the store (with `copy`)
  double seconds = 0;
};

// The dp a new dataset of `job` gets when none is given: the dp every step of the job has.
// kFailedPrecondition when the job has no step, or steps of different dp (naming two).
Result<int> job_dp(const Store& store, const std::string& job);

// Indexes and validates the files, copies them with `copy`, writes the sample table into a
// pending blob and reserves the name. `home`: the node holding the files ("" outside a
// cluster). `summary` gets what the add read and copied.
Result<PreparedChange> prepare_dataset_add(Store& store, const DatasetAddRequest& req, int dp, const std::string& home,
                                           DatasetAddSummary& summary, const IndexProgress& progress = {});

// A dataset built on this node from another node's sample table (a cluster add): `record`
// is the home's record (its "table" is replaced by the local blob `table`).
Result<PreparedChange> prepare_dataset_copy(Store& store, const std::string& job, const std::string& name,
                                            const nlohmann::json& record, uint64_t table);

// The next version of a dataset at `epoch` (none: its current epoch) after `consumed`
// samples; `from_version` (when given) must be the current version. With `dp` or
// `global_batch` (0: the dataset's own) it is also re-split there as resplit_datasets does
// (ptc::rebatched), both in one version. With `batch_offset` (which needs `epoch` and
// `global_batch`) the position is set to exactly (epoch, consumed, batch_offset) at that
// global batch (and `dp`, 0: the current one), whatever it was: a job restoring a checkpoint.
Result<PreparedChange> prepare_dataset_progress(const Store& store, const std::string& job, const std::string& name,
                                                std::optional<uint64_t> epoch, uint64_t consumed,
                                                std::optional<uint64_t> from_version = {}, int dp = 0,
                                                uint64_t global_batch = 0, std::optional<uint64_t> batch_offset = {});

// The new versions of every dataset of `job` whose dp is not `dp` or, with `global_batch`
// (0: none), whose global batch is not it (ptc::rebatched: the order continues at the
// consumed count); kInvalidArgument naming the dataset when dp does not divide its (new)
// global batch or the dataset has fewer samples than one, or when `global_batch` is given to
// a job with no dataset (then nothing is to change).
Result<std::vector<DatasetChange>> resplit_datasets(const Store& store, const std::string& job, int dp,
                                                    uint64_t global_batch = 0);

// The datasets `changes` re-split, each at the version it replaces (name -> version).
std::map<std::string, uint64_t> resplit_versions(const std::vector<DatasetChange>& changes);

// The current version; kNotFound naming the job or the dataset.
Result<std::shared_ptr<const DatasetVersion>> current_dataset(const Store& store, const std::string& job,
                                                              const std::string& name);

}  // namespace ptcfs
