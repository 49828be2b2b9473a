// The write-through S3 tier (docs/OPERATIONS.md "The S3 tier"): every committed step (saved,
// imported, repartitioned) is written to S3 in the background as a durable copy
// (daemon/durable/durable_plan.h), this node writing the rank files of the shards it is the
// first holder of. Nothing here is on a read's or a save's path: a slow, stopped or refusing
// S3 only delays the copy, and the step's state says why (`ptcfs ls`).
//
// One worker thread looks at the store's steps after every published change and every `poll`.
// A step is durable on this node once S3 holds a whole copy with this node's files, byte for byte.
// It stays durable through repartitions (the copy holds the same tensors at its own layout) and
// across restarts: a record in the store's metadata (Store::durable_key), which goes with the step
// when it is removed. A step without that record is written: each node writes its files, or finds
// them there already (a part record or the copy's manifest stating the same size and XXH3 as its
// own bytes: nothing is sent again, as after a restart or a restore from this copy), and writes a
// fresh part record. The committing node counts only records of the version's number and origin
// (so records of another step once saved under the name do not count), and keeps a copy whose
// ptc.json and manifest state exactly those files; another copy (another layout, another step) is
// taken back, ptc.json first, and written anew. A multipart upload cut short goes on from the
// parts S3 holds, after a restart too (its id is kept in the metadata). A failure is tried again
// after a capped backoff; a step waiting for other nodes is polled less and less often (up to
// wait_cap: a HEAD, and a GET of the manifest once there is one). `ptcfs rm` leaves the copy in S3 (a
// checkpoint removed from the nodes can still be imported from it).
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/durable/disk_budget.h"
#include "daemon/durable/durable_plan.h"
#include "ptc/base/status.h"
#include "transport/s3_client.h"

namespace ptcfs {

class Store;
class StepVersion;

namespace durable {

// A step's durability on this node.
struct StepDurability {
  enum class State {
    kLocal,      // not written yet (or waiting to try again: `note` says why)
    kUploading,  // this node is writing its files
    kWaiting,    // this node's files are written; the copy waits for others' or its commit
    kDurable,    // a whole copy is in S3
  };
  State state = State::kLocal;
  uint64_t version = 0;                      // of the step the copy is cut from
  uint64_t bytes_done = 0, bytes_total = 0;  // of this node's files
  std::string note;                          // what it waits for, or the last error
  int failures = 0;                          // in a row
};
std::string_view state_name(StepDurability::State s);

struct TierOptions {
  std::string self;  // this node's id ("" on one node)
  // The ids of the nodes holding each shard of a version, in layout().shards() order, the first
  // writing it. Unset: this node holds every shard.
  std::function<Result<std::vector<std::vector<std::string>>>(const StepVersion&)> holders;
  std::chrono::milliseconds poll{1000};
  std::chrono::milliseconds retry_base{1000}, retry_cap{30000};
  // The longest pause between two looks at a step waiting for other nodes: how late a node at
  // most says durable after the copy's commit.
  std::chrono::milliseconds wait_cap{4000};
  uint64_t part_bytes = uint64_t{64} << 20;  // multipart parts (and the largest single PUT)
  // The disk budget (daemon/durable/disk_budget.h): blobs of durable steps are evicted while
  // the blobs take more. 0: none (blobs an earlier run evicted are still fetched back).
  uint64_t disk_budget = 0;
};

class DurableTier {
 public:
  // `store` must outlive this object; the worker starts at once. `reads` (the same endpoint
  // and prefix as `s3`) fetches evicted blobs back, apart from the uploads.
  DurableTier(Store& store, std::unique_ptr<transport::S3Client> s3, std::unique_ptr<transport::S3Client> reads,
              TierOptions o);
  ~DurableTier();  // stops the worker (an upload under way stops between parts)
  DurableTier(const DurableTier&) = delete;
  DurableTier& operator=(const DurableTier&) = delete;

  // The store published a change: look at the steps again.
  void notice();
  // The step's durability on this node; nullopt for a step this node does not have.
  std::optional<StepDurability> state(const std::string& job, const std::string& step) const;
  // s3://bucket/prefix of the copies.
  std::string where() const;

  // A node catching up on a step it lost the bytes of (docs/OPERATIONS.md "A node that lost its
  // data directory"): shards `shards` of version `version` (of origin `origin`, at `layout`) over
  // the step's durable copy, when S3 holds a whole copy of that version or of `copy_origin`'s
  // (DiskBudget::restore: kNotFound while no copy is whole; nullopt for a copy of other tensors).
  // Their blobs are evicted from the start and pending; nothing is written yet: `records` holds
  // their evicted/ records and the step's durable record naming the copy's version (the tier
  // never reads those bytes to upload them: the copy is there). Any thread.
  struct Restored {
    CopyRestore shards;
    WriteBatch records;
    VersionId copy;
  };
  Result<std::optional<Restored>> restore(const std::string& job, const std::string& step, uint64_t version,
                                          const std::string& origin, const std::string& copy_origin,
                                          const ptc::Layout& layout, const std::vector<size_t>& shards);
  // Writes r.records (under the step's claim, before the commit): the batch that puts the
  // metadata back as it was, for a commit that fails.
  Result<WriteBatch> record_restore(const std::string& job, const std::string& step, const Restored& r);
  // After the commit: the step's durable record as any other's (kept through repartitions).
  void restore_committed(const std::string& job, const std::string& step, const Restored& r);

 private:
  using Key = std::pair<std::string, std::string>;
  struct Work {
    StepDurability d;
    std::chrono::steady_clock::time_point next_try{};
    std::optional<std::string> upload_id;  // a multipart upload of this node's current file
    std::string upload_file;
    uint64_t serial = 0;          // of the step version being written (StepVersion::serial)
    int waits = 0;                // passes spent waiting for other nodes
    std::vector<FilePart> parts;  // this node's files, written
    std::optional<std::chrono::steady_clock::time_point> started;  // the first upload of this version
  };
  void run();
  void pass();
  // One step forward for a step that is not durable: ok when it needs nothing more now
  // (durable, or waiting), an error to try again later.
  Status advance(const Key& key, const std::shared_ptr<const StepVersion>& v, Work& w);
  // kUnavailable when the store's current version of the step is no longer `v`.
  Status current(const Key& key, const std::shared_ptr<const StepVersion>& v) const;
  // This node's file of `shard`: its size and XXH3 (a read of the local bytes).
  Result<FilePart> digest(const std::shared_ptr<const StepVersion>& v, const ptc::ShardId& shard);
  Status upload(const Key& key, const std::shared_ptr<const StepVersion>& v, const ptc::ShardId& shard, Work& w,
                FilePart& part);
  Status commit(const Key& key, const std::shared_ptr<const StepVersion>& v, Work& w, bool& done);
  Status mark_durable(const Key& key, const StepVersion& v, Work& w);
  // A multipart upload this node started is recorded in its metadata (so that a run after a
  // crash goes on with it, or aborts it) until it completes or is aborted.
  Status keep_upload(const Key& key, const Work& w, const StepVersion& v);
  // The multipart part size: --s3-part-mib, at least S3's smallest part.
  uint64_t part_size() const;
  // Aborts w's multipart upload (when `abort`) and forgets it, record included.
  void end_upload(const Key& key, Work& w, bool abort);
  // A new version's work: goes on with the upload an earlier run left open for it, or aborts that.
  void take_left_upload(const Key& key, const StepVersion& v, Work& w);
  Result<std::vector<std::vector<std::string>>> holders_of(const StepVersion& v) const;
  bool stopping() const;
  void set(const Key& key, const Work& w);

  Store& store_;
  std::unique_ptr<transport::S3Client> s3_;
  const TierOptions o_;

  mutable std::mutex mu_;  // guards shown_, stop_, wake_
  std::condition_variable cv_;
  std::map<Key, StepDurability> shown_;  // what state() answers, copied from the worker's
  bool stop_ = false, wake_ = false;

  // The worker's own (no lock).
  std::map<Key, Work> work_;
  std::map<Key, std::string> recorded_;  // steps with a durable record -> the origin of the copy's version
  struct LeftUpload {
    std::string file, upload_id, origin;
    uint64_t version = 0, part_bytes = 0;
  };
  std::map<Key, LeftUpload> left_;  // multipart uploads an earlier run left open, not yet taken
  bool first_pass_ = true;
  std::unique_ptr<DiskBudget> budget_;
  std::thread worker_;
};

}  // namespace durable
}  // namespace ptcfs
