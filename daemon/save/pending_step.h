// A step being saved through the mount (docs/FORMATS.md "Saving into the mount"): the files
// written into MNT/<job>/<step>/ so far, each straight into the blob that will hold it.
//
//   ptc.json                      kept in memory (at most 64 MiB); several writers at once, each
//                                 its own copy, parsed when it closes: the first valid one is the
//                                 step's, a later one must say the same (else its close fails)
//   tp{t}-pp{p}.safetensors       a whole shard, one writer front to back; checked against
//                                 ptc.json with import's rules when closed
//   tp{t}-pp{p}/<tensor>.npy      one tensor of a shard; several writers may write disjoint
//                                 ranges (pwrite); its header is checked as soon as written
//
// A tensor file's bytes are kept in memory until its npy header is known (at most 1 MiB: a
// writer that goes further first gets the file a blob of its own); then a file of at most
// 4 MiB gets a region of its shard's pack, one blob per shard holding every small tensor of
// it, and a larger one a blob of its own. A step saved per tensor so uses a few blobs, not one
// (and an open descriptor until the commit, and a sync at it) per tensor.
//
// ptc.json is what every writing rank or node of a job writes alike: each handle writes its own
// draft, checked at its close, so that identical copies all succeed and a different one fails
// its own close (EINVAL) without touching the step's. A shard file is written whole: it has at
// most one handle open for writing, so that two writers never mix their bytes into one file:
// another open for writing is refused
// (EBUSY) until that handle's release. The kernel sends a release after close() returns, so an
// open that finds the handle closed (flushed) and not written since waits for its release a
// moment: a writer that closes the file and opens it again at once is not refused. A flush
// from a forked copy of the descriptor (a child's exit or exec) looks the same, and the wait
// then ends in EBUSY; the checks such a close ran are undone when the writer writes again.
//
// A shard is written one way or the other, not both. Checks run as soon as both a file and
// ptc.json are known; a contradiction fails the write or the close and is kept as the
// file's error, so the step cannot commit until the file is removed and written again.
// The step is complete when ptc.json and every shard of its layout are written in full
// and every file is closed; SaveService then commits it.
//
// Thread-safety: one mutex per step guards the step and its files (PTC_GUARDED_BY, checked by
// clang in `make test`); the bytes of a write go to the blob outside it (disjoint ranges of one
// file are written at once).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/save/byte_ranges.h"
#include "daemon/save/file_check.h"
#include "daemon/save/placement.h"
#include "daemon/save/writer_gate.h"
#include "daemon/store/blob_store.h"
#include "daemon/store/store.h"
#include "fs/content.h"
#include "ptc/formats/npy.h"
#include "ptc/formats/safetensors.h"
#include "ptc/base/mutex.h"
#include "ptc/layout.h"

namespace ptcfs {

class PendingFile;
class StagedFile;

// What one file adds to its step's tally (PendingStep::note).
struct FileCount {
  bool open = false;      // a writer has it open
  bool failed = false;    // it has an error
  bool unplaced = false;  // a data file of a shard the layout does not have
  int shard = -1;         // a data file: its shard's index in the layout (once known)
  size_t done = 0;        // slices of that shard it holds in full (a shard file: all or none; a tensor: 0 or 1)
  bool short_of = false;  // a data file that is not written in full (or not checked yet)
  bool operator==(const FileCount&) const = default;
};

class PendingStep : public std::enable_shared_from_this<PendingStep> {
 public:
  // `name`: the step's claim (Store::claim, kNewStep), held until the commit takes it or the
  // step is removed.
  PendingStep(std::string job, std::string step, int64_t created, Claim name = {})
      : job(std::move(job)), step(std::move(step)), created(created), claim(std::move(name)) {}

  const std::string job, step;
  const int64_t created;

  mutable Mutex mu;                      // guards everything below and the files' fields
  std::condition_variable_any released;  // a whole file's handle was released
  std::shared_ptr<const void> stamp PTC_GUARDED_BY(mu) = std::make_shared<int>(0);  // new on every add or remove
  std::set<std::string> dirs PTC_GUARDED_BY(mu);
  std::map<std::string, std::shared_ptr<PendingFile>> files PTC_GUARDED_BY(mu);
  // The files of a stock DCP save, until its .metadata lands (daemon/save/staged_file.h).
  std::map<std::string, std::shared_ptr<StagedFile>> staged PTC_GUARDED_BY(mu);
  bool converting PTC_GUARDED_BY(mu) = false;  // its .metadata landed: the save becomes tensor files
  std::optional<ptc::Layout> layout PTC_GUARDED_BY(mu);
  std::string ptc_text PTC_GUARDED_BY(mu);  // of the parsed ptc.json
  uint64_t draft_bytes PTC_GUARDED_BY(mu) =
      0;  // what the open drafts of ptc.json hold, together (kMaxDraftBytes at most)
  bool removed PTC_GUARDED_BY(mu) = false;
  bool committing PTC_GUARDED_BY(mu) = false;
  // Its blobs are finished (padding zeroed, synced, closed): a cluster commit of it was
  // prepared and then aborted, and the next try takes the same blobs (SaveService::take_back).
  bool sealed PTC_GUARDED_BY(mu) = false;
  std::string failure PTC_GUARDED_BY(mu);  // a commit that failed: the step can only be removed
  Claim claim PTC_GUARDED_BY(mu);          // the step's name; moved into the change that commits it
  BlobStore* blobs = nullptr;              // where its files' blobs are made
  // Per shard: the blob that holds its small tensor files, and where the next one goes.
  struct Pack {
    std::shared_ptr<BlobWriter> blob;
    uint64_t next = 0;
  };
  std::map<ptc::ShardId, Pack> packs PTC_GUARDED_BY(mu);

  // Frees the step's name (it is removed, or the save service stops).
  void release_name() {
    MutexLock lock(mu);
    claim.release();
  }

  std::string name() const { return job + "/" + step; }
  // Checks a file against the layout (when known) and records its error.
  Status check(PendingFile& f) PTC_REQUIRES(mu);
  // A writer's draft of ptc.json `f`, at its close: the first valid one becomes the file and the
  // layout, and every file is checked against it; a later one must say the same.
  Status take_ptc(PendingFile& f, const std::string& text) PTC_REQUIRES(mu);
  // The layout changed (ptc.json taken or removed): every file counted again.
  void recount() PTC_REQUIRES(mu);
  // A file changed (or was removed): its part of the tally brought up to date. Every change of
  // a file that complete() and part_complete() look at goes through here.
  void note(PendingFile& f) PTC_REQUIRES(mu);

  // ptc.json and every shard of the layout written in full and closed: O(log files), from the
  // tally (a close asks, and a step saved per tensor has 100,000s of files).
  bool complete() const PTC_REQUIRES(mu);
  // In a cluster, this node's part: ptc.json written, every file closed and checked, and every
  // shard it has files of written in full (other shards may come from other nodes).
  bool part_complete() const PTC_REQUIRES(mu);
  // The same two, from a pass over every file (what the commit goes by).
  bool complete_scan() const PTC_REQUIRES(mu);
  bool part_complete_scan() const PTC_REQUIRES(mu);
  // The shards of the layout this node has written in full (layout order).
  std::vector<bool> complete_shards() const PTC_REQUIRES(mu);
  // Bytes of tensor data written, and the total the layout needs (0 before ptc.json).
  uint64_t bytes_written() const PTC_REQUIRES(mu);
  uint64_t bytes_total() const PTC_REQUIRES(mu);
  // Set by the save service: called (outside the lock) when the last writer of a file
  // closes it, so that a complete step gets committed.
  std::function<void(const std::shared_ptr<PendingStep>&)> on_closed;

 private:
  // ptc.json taken, and no writer has it open.
  bool ptc_complete() const PTC_REQUIRES(mu);
  FileCount count_of(const PendingFile& f) const PTC_REQUIRES(mu);
  void add(const FileCount& c, bool remove) PTC_REQUIRES(mu);
  bool shard_whole(size_t i) const PTC_REQUIRES(mu) {
    return tally_.done[i] == layout->slices(layout->shards()[i]).size() && tally_.short_of[i] == 0;
  }
  // Sums of every live file's FileCount, per shard where it says.
  struct Tally {
    size_t open = 0, failed = 0, unplaced = 0;
    std::vector<size_t> files, done, short_of;  // per shard of the layout
    size_t whole = 0;                           // shards written in full
    size_t broken = 0;                          // shards with files here, not written in full
  } tally_ PTC_GUARDED_BY(mu);
};

class PendingFile final : public fs::WriteFile {
 public:
  enum class Kind { kPtcJson, kShard, kTensor };

  PendingFile(std::shared_ptr<PendingStep> step, Kind kind, std::string rel, ptc::ShardId shard, std::string tensor,
              std::shared_ptr<BlobWriter> blob);

  uint64_t size() const override;
  Result<uint64_t> open_writer() override;
  Status write(uint64_t writer, uint64_t off, const void* data, size_t len) override;
  Status truncate(uint64_t writer, uint64_t size) override;
  Status flush(uint64_t writer) override;
  void release(uint64_t writer) override;
  bool committing() const override;

  // Who it is: fixed when made.
  const Kind kind;
  const std::string rel;     // in the step's folder
  const ptc::ShardId shard;  // kShard, kTensor
  const std::string tensor;  // kTensor

  // The rest is its step's (PendingStep::mu), in three parts and its byte count:
  WriterGate gate PTC_GUARDED_BY(step_->mu);      // who may write it (daemon/save/writer_gate.h)
  Placement place PTC_GUARDED_BY(step_->mu);      // where its bytes are (daemon/save/placement.h)
  FileCheck check PTC_GUARDED_BY(step_->mu);      // what its checks found (daemon/save/file_check.h)
  uint64_t resets PTC_GUARDED_BY(step_->mu) = 0;  // truncations to 0: a write under way across one is not counted
  ByteRanges written PTC_GUARDED_BY(step_->mu);
  uint64_t end PTC_GUARDED_BY(step_->mu) = 0;   // the file's size: the largest end of a write or truncate
  bool dead PTC_GUARDED_BY(step_->mu) = false;  // unlinked, or its step removed
  FileCount counted PTC_GUARDED_BY(step_->mu);  // what it adds to the step's tally now
  // kPtcJson: what each open handle has written, until its close (the file is the first one
  // accepted: place.text, written, end).
  struct Draft {
    std::string text;
    ByteRanges written;
  };
  std::map<uint64_t, Draft> drafts PTC_GUARDED_BY(step_->mu);

  // A shard file: written whole, by one writer at a time.
  bool whole() const { return kind == Kind::kShard; }
  // Written in full, closed, and (with the layout known) checked.
  bool complete() const PTC_REQUIRES(step_->mu);
  // Data bytes written (for `ls`).
  uint64_t data_written() const PTC_REQUIRES(step_->mu);

 private:
  friend void mine(const PendingStep& s, const PendingFile& f);

  // A whole file's checks at its close.
  Status check_closed(const std::string& where) PTC_REQUIRES(step_->mu);
  // ptc.json: a write into the writer's draft, and the draft's check at its close.
  Status write_draft(uint64_t writer, uint64_t off, const void* data, size_t len, const std::string& where)
      PTC_REQUIRES(step_->mu);
  Status close_draft(uint64_t writer, const std::string& where) PTC_REQUIRES(step_->mu);
  // A tensor file: parses its npy header once its first bytes are written, and gives the file
  // its blob (place_bytes).
  Status take_header(const std::string& where) PTC_REQUIRES(step_->mu);
  // A tensor file kept in memory: a region of its shard's pack (known to be small) or a blob of
  // its own, with the bytes kept so far written there.
  Status place_bytes(const std::string& where) PTC_REQUIRES(step_->mu);

  const std::shared_ptr<PendingStep> step_;
};

// Tells the thread-safety analysis that `f`'s fields are guarded by the lock of `s`, which the
// caller holds: `f` must be one of its files (checked).
inline void mine(const PendingStep& s, const PendingFile& f) PTC_REQUIRES(s.mu) PTC_ASSERT_CAPABILITY(f.step_->mu) {
  if (f.step_.get() != &s) std::abort();
}

}  // namespace ptcfs
