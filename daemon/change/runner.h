// The changes a node makes to the job's state, behind one interface for one node and for a
// cluster (docs/ARCHITECTURE.md "Changes"): an import, a repartition, a removal, a dataset
// add or progress, and the commit of a step saved into the mount. The control service and the
// node's ticker call a ChangeRunner and never ask which kind they hold:
//
// - LocalRunner (daemon/change/local_runner.h): the change is prepared and committed on this
//   node through the one commit path (daemon/store/prepared.h);
// - Coordinator (daemon/cluster/coordinator.h): the change is prepared on every node that takes
//   part and committed on all of them together, or on none (two phases).
//
// Requests and results are typed; the control service parses the CLI's JSON into requests and
// prints results (daemon/control/results.h), so the wire format lives in one place.
//
// Thread-safety: every method may be called from many threads at once. Changes of one step or
// dataset are serialized by the store's claims (a second concurrent change of it is refused
// with kFailedPrecondition or kAlreadyExists). Errors come back as Status values naming the
// step, dataset, file or node at fault; a failed change leaves the stored state as it was.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/dataset/dataset_ops.h"
#include "daemon/reshard/repartition.h"
#include "daemon/store/dataset_version.h"
#include "ptc/base/status.h"
#include "ptc/formats/ptc_template.h"
#include "ptc/model.h"

namespace ptcfs {

// `ptcfs import DIR --job J --step S [--nodes ...]`, or with --format hf a Hugging Face
// checkpoint and a PTC template (then, optionally, straight into the layout `then`).
struct ImportRequest {
  std::string dir, job, step;
  std::vector<std::string> nodes;          // ids to place the ranks on (empty: every member)
  std::optional<formats::PtcTemplate> hf;  // set: --format hf with this template
  std::optional<ptc::Parallelism> then;    // --to: the layout to repartition the new step into
};

struct ImportResult {
  std::string job, step;
  std::string format = "ptc";      // "ptc", "hf" or "dcp"
  std::string template_name;       // with hf
  size_t shards = 0, tensors = 0;  // on a cluster: shard copies over every node
  uint64_t bytes = 0;              // tensor bytes copied (every node together)
  double seconds = 0;
  struct NodePart {
    std::string node;
    size_t shards = 0;
    uint64_t bytes = 0;
  };
  std::vector<NodePart> nodes;                   // on a cluster: what each node imported
  std::optional<RepartitionResult> repartition;  // with hf and `then`
};

// `ptcfs rm JOB/STEP` of a committed step.
struct RemoveRequest {
  std::string job, step;
};

// `ptcfs dataset add`: DatasetAddRequest (daemon/dataset/dataset_ops.h), with its dp resolved.
struct DatasetAddResult {
  std::shared_ptr<const DatasetVersion> version;  // the dataset as added
  DatasetAddSummary summary;                      // bytes indexed and copied, seconds
  size_t nodes = 0;                               // on a cluster: the nodes that hold it
};

// `ptcfs dataset progress`: the position a job reached (none: the current epoch).
struct DatasetProgressRequest {
  std::string job, name;
  std::optional<uint64_t> epoch;
  uint64_t consumed = 0;
  // Also re-split there for this dp and global batch (0: the dataset's own), as a repartition
  // would: what a job that changed its mesh without a checkpoint asks (docs/FORMATS.md
  // "A new global batch").
  int dp = 0;
  uint64_t global_batch = 0;
  // With epoch and global_batch: the position is set to exactly this (epoch, consumed,
  // batch_offset) at that batch, not moved from the current one (a job back at a checkpoint
  // taken before a later change of the batch).
  std::optional<uint64_t> batch_offset{};
};

// A step saved into the mount whose part on this node is complete: commit it (on one node at
// once; on a cluster on every node together, once their parts cover the layout).
struct SaveCommitRequest {
  std::string job, step;
};

// What `ptcfs status` shows of the node's part in a cluster (nothing on one node).
struct RunnerStatus {
  struct Node {
    std::string id, addr;
    int gpus = 0;
    bool up = false;
    uint64_t bytes_sent = 0, bytes_received = 0;
    std::string error;  // why it is not up
  };
  bool cluster = false;
  std::string self;           // this node's id (a cluster)
  std::vector<Node> nodes;    // every member, in placement order
  nlohmann::json membership;  // how membership works (static, or etcd's endpoints and lease)
};

class ChangeRunner {
 public:
  virtual ~ChangeRunner() = default;

  virtual Result<ImportResult> import(const ImportRequest& req, const PhaseProgress& progress) = 0;
  // `req.nodes` places the new layout on those node ids (a cluster only; empty: every member).
  virtual Result<RepartitionResult> repartition(const RepartitionRequest& req, const PhaseProgress& progress) = 0;
  virtual Status remove(const RemoveRequest& req) = 0;
  // `req.dp` is set (the control service resolves the job's dp first).
  virtual Result<DatasetAddResult> dataset_add(const DatasetAddRequest& req, const PhaseProgress& progress) = 0;
  virtual Result<std::shared_ptr<const DatasetVersion>> dataset_progress(const DatasetProgressRequest& req) = 0;
  // Returns once the step is committed, or the commit is left to another node or a later
  // call (a cluster whose parts do not cover the layout yet); an error when it was refused.
  virtual Status save_commit(const SaveCommitRequest& req) = 0;
  virtual RunnerStatus status() = 0;
};

}  // namespace ptcfs
