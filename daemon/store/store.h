// The node's local store: blob files under DATA/blobs and metadata in RocksDB under
// DATA/meta. It keeps the current version of every step in memory as an immutable
// snapshot; a commit writes metadata in one atomic batch, then publishes a new snapshot.
//
// Thread-safety: all methods may be called concurrently. Commits are serialized.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "daemon/store/blob_store.h"
#include "daemon/store/dataset_version.h"
#include "daemon/store/kv.h"
#include "daemon/store/step_version.h"

namespace ptcfs {

struct Snapshot {
  // (job, step) -> current version
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const StepVersion>> steps;
  // (job, dataset name) -> current version
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const DatasetVersion>> datasets;
};

// A new version of a dataset replacing `replaced` (null: a new dataset).
struct DatasetChange {
  std::shared_ptr<const DatasetVersion> next;
  std::shared_ptr<const DatasetVersion> replaced;
};

class Store;
struct PreparedChange;

// A name claimed for a change (Store::claim): released when destroyed, or by release().
// Move-only; a moved-from or released claim holds nothing. The store must outlive it.
// Not thread-safe: one owner at a time (a prepared change, a pending step).
class Claim {
 public:
  enum Kind { kNewStep, kChangeStep, kNewDataset, kChangeDataset };

  Claim() = default;
  Claim(Claim&& o) noexcept
      : store_(std::exchange(o.store_, nullptr)), kind_(o.kind_), job_(std::move(o.job_)), name_(std::move(o.name_)) {}
  Claim& operator=(Claim&& o) noexcept;
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;
  ~Claim() { release(); }

  void release();
  explicit operator bool() const { return store_ != nullptr; }
  Kind kind() const { return kind_; }
  const std::string& job() const { return job_; }
  const std::string& name() const { return name_; }

 private:
  friend class Store;
  Claim(Store* store, Kind kind, std::string job, std::string name)
      : store_(store), kind_(kind), job_(std::move(job)), name_(std::move(name)) {}
  Store* store_ = nullptr;
  Kind kind_ = kNewStep;
  std::string job_, name_;
};

class Store {
 public:
  // Opens DATA (creating it), loads every step, and removes blobs no step refers to
  // (left by an interrupted import or repartition) and no kept prepared change holds.
  // `remote` (may be null; must outlive the store) reads the slices of shards held by
  // other nodes; every version the store loads or is given refers to it. `samples` (may be
  // null; must outlive the store) likewise reads the samples of datasets whose files are
  // on other nodes. `changed` (may be empty) is called after every published change, on the
  // committing thread, outside the store's locks (the node refreshes the mount's tree).
  static Result<std::unique_ptr<Store>> open(const std::string& data_dir, const RemoteSlices* remote = nullptr,
                                             const RemoteSamples* samples = nullptr,
                                             std::function<void()> changed = {});
  const RemoteSlices* remote() const { return remote_; }
  const RemoteSamples* remote_samples() const { return samples_; }

  std::shared_ptr<const Snapshot> snapshot() const;
  // Version `version` of a step: the current one, or a replaced one still held by a reader;
  // nullptr when neither.
  std::shared_ptr<const StepVersion> find_version(const std::string& job, const std::string& step,
                                                  uint64_t version) const;
  BlobStore& blobs() { return *blobs_; }
  const std::string& data_dir() const { return data_dir_; }

  // Claims a name for a change until the Claim is released or destroyed (daemon/store/prepared.h):
  //   kNewStep     a new step (an import, a save, a catch-up): the one door every new step
  //                passes. kInvalidArgument for a job or step name ptc::validate_id refuses,
  //                or the reserved step name "data" (MNT/<job>/data holds the job's datasets);
  //                kAlreadyExists when the step exists or is claimed ("is being imported").
  //   kChangeStep  a new version or the removal of a step (repartition, rm): kFailedPrecondition
  //                when it is claimed already ("is already being repartitioned").
  //   kNewDataset  a new dataset: kAlreadyExists when it exists or is claimed ("is being added").
  Result<Claim> claim(Claim::Kind kind, const std::string& job, const std::string& name);
  // The name gate of kNewStep on its own, for a coordinator that refuses a bad name before it
  // asks any node to claim it.
  static Status check_new_step(const std::string& job, const std::string& step);

  // A new version of a step, not yet committed, created now: it reads its blobs from this
  // store's BlobStore and the slices of shards held elsewhere through remote(). Both outlive
  // it, as they outlive every version the store loads or hands out.
  std::shared_ptr<StepVersion> new_version(std::string job, std::string step, uint64_t version, ptc::Layout layout,
                                           std::vector<std::vector<StoredSlice>> stored, StepPlacement placement = {});

  // Removes blob files that no live version refers to (current, or replaced but still held
  // by a reader) and that are not pending. Returns how many were removed.
  Result<size_t> collect_garbage();
  // The blobs that versions replaced but still held by a reader use, and every dataset's: what
  // must stay on disk whatever the current steps' durable copies hold (the S3 tier's budget).
  std::set<uint64_t> pinned_blobs() const;

  // Metadata records of other kinds than versions (prepared changes kept across a restart,
  // daemon/store/prepared_record.h): written atomically and durably, scanned by prefix.
  Status write_meta(const WriteBatch& batch) { return kv_->write(batch); }
  Status scan_meta(std::string_view prefix, const KvStore::ScanFn& fn) { return kv_->scan(prefix, fn); }
  Result<std::optional<std::string>> read_meta(std::string_view key) { return kv_->get(key); }  // nullopt: absent
  // Records under this prefix are prepared changes; each is JSON whose "blobs" lists the blob
  // ids it holds, which open() keeps pending (garbage collection leaves them alone).
  static constexpr std::string_view kPreparedPrefix = "prepared/";
  // The record of a step whose durable copy this node knows is whole (the S3 tier,
  // daemon/durable/durable_tier.h): it lives as long as the step, through its repartitions, and
  // goes with it in remove_step's write (so that a step saved later under the name is not taken
  // for it).
  static std::string durable_key(const std::string& job, const std::string& step);
  static constexpr std::string_view kDurablePrefix = "durable/";
  // The origin of the version that record says the copy is of ({"version", "origin"}; or
  // another string member of it, `member`): "" without a record, or one an older ptcfsd wrote
  // (no origin), or one that cannot be read.
  std::string durable_origin(const std::string& job, const std::string& step, const char* member = "origin");

 private:
  // commit and remove_step are the store's half of the one commit path: commit_change
  // (daemon/store/prepared.h) is their only caller.
  friend Status commit_change(Store& store, PreparedChange& change);
  friend class Claim;

  // Commits a new step, or a new version replacing `replaced` (the current one), in one
  // atomic metadata write, then publishes it. The new version's blobs are settled; a
  // replaced version stays readable by those who hold it and its blobs are collected
  // once nobody does. kFailedPrecondition when `replaced` is no longer current.
  // `datasets` are committed in the same write (a repartition re-splits the job's datasets);
  // each fails the whole commit like `replaced` when its replaced version is not current.
  // A null `v` commits the datasets alone.
  Status commit(std::shared_ptr<const StepVersion> v, std::shared_ptr<const StepVersion> replaced = nullptr,
                const std::vector<DatasetChange>& datasets = {});

  // Removes a step, whose current version is `current`, in one atomic metadata write
  // (`ptcfs rm`, through commit_change); files opened before keep reading it, and its blobs
  // are collected once they close. kFailedPrecondition when `current` is no longer current.
  Status remove_step(std::shared_ptr<const StepVersion> current);

  Store(std::string data_dir, std::unique_ptr<KvStore> kv, std::unique_ptr<BlobStore> blobs, const RemoteSlices* remote,
        const RemoteSamples* samples, std::function<void()> changed)
      : data_dir_(std::move(data_dir)),
        kv_(std::move(kv)),
        blobs_(std::move(blobs)),
        remote_(remote),
        samples_(samples),
        changed_(std::move(changed)) {}
  void changed() const {
    if (changed_) changed_();
  }
  Status load();
  void release(Claim::Kind kind, const std::string& job, const std::string& name);

  std::string data_dir_;
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<BlobStore> blobs_;
  const RemoteSlices* remote_;
  const RemoteSamples* samples_;
  const std::function<void()> changed_;
  mutable std::mutex mu_;  // guards snap_, claimed_; commits hold commit_mu_ first
  std::mutex commit_mu_;
  std::shared_ptr<const Snapshot> snap_ = std::make_shared<Snapshot>();
  std::set<std::tuple<Claim::Kind, std::string, std::string>> claimed_;
  std::vector<std::weak_ptr<const StepVersion>> retired_;  // replaced versions, maybe still held
  std::vector<std::weak_ptr<const DatasetVersion>> retired_datasets_;
};

// What the mount shows of a store: its current steps and datasets.
fs::Contents mount_contents(const Store& store);

}  // namespace ptcfs
