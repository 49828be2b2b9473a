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
// Thread-safety: one mutex per step guards the step and its files; the bytes of a write
// go to the blob outside it (disjoint ranges of one file are written at once).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/save/byte_ranges.h"
#include "daemon/store/blob_store.h"
#include "daemon/store/store.h"
#include "fs/content.h"
#include "ptc/formats/npy.h"
#include "ptc/formats/safetensors.h"
#include "ptc/layout.h"
#include "daemon/save/writer_gate.h"

namespace ptcfs {

class PendingStep;
class DcpStagedFile;

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

class PendingFile final : public fs::WriteFile {
 public:
  enum class Kind { kPtcJson, kShard, kTensor };

  PendingFile(std::shared_ptr<PendingStep> step, Kind kind, std::string rel, ptc::ShardId shard, std::string tensor,
              std::shared_ptr<BlobWriter> blob);

  uint64_t size() const override;
  ptc::Result<uint64_t> open_writer() override;
  ptc::Status write(uint64_t writer, uint64_t off, const void* data, size_t len) override;
  ptc::Status truncate(uint64_t writer, uint64_t size) override;
  ptc::Status flush(uint64_t writer) override;
  void release(uint64_t writer) override;
  bool committing() const override;

  // The rest is used under the step's lock (PendingStep::mu).
  Kind kind;
  std::string rel;     // in the step's folder
  ptc::ShardId shard;  // kShard, kTensor
  std::string tensor;  // kTensor
  std::string text;    // kPtcJson: the file; kTensor: its bytes while they are kept in memory (no blob yet)
  // Where the bytes go: a shard file's blob, or a tensor file's (its own or its shard's pack);
  // null while a tensor file is kept in memory. Byte 0 of the file is at `base` in it.
  std::shared_ptr<BlobWriter> blob;
  uint64_t base = 0;
  uint64_t resets = 0;  // truncations to 0: a write under way across one is not counted
  ByteRanges written;
  uint64_t end = 0;             // the file's size: the largest end of a write or truncate
  WriterGate gate;              // who may write it (daemon/save/writer_gate.h)
  bool error_at_close = false;  // `error` was found by that close (void if the writer writes again)
  bool dead = false;            // unlinked, or its step removed
  FileCount counted;            // what it adds to the step's tally now
  // Known once the header is written (and, for a shard, the file closed): where the data
  // starts and the size the header declares.
  std::optional<uint64_t> expected;
  ptc::SafetensorsHeader header;       // kShard
  ptc::NpyHeader npy;                  // kTensor
  std::vector<size_t> entry_of_slice;  // kShard, once checked against the layout
  std::string error;                   // why the file contradicts ptc.json or itself ("" if it does not)
  // kPtcJson: what each open handle has written, until its close (the file is the first one
  // accepted: text, written, end).
  struct Draft {
    std::string text;
    ByteRanges written;
  };
  std::map<uint64_t, Draft> drafts;

  // A shard file: written whole, by one writer at a time.
  bool whole() const { return kind == Kind::kShard; }
  // Written in full, closed, and (with the layout known) checked.
  bool complete() const;
  // Data bytes written (for `ls`).
  uint64_t data_written() const;

 private:
  // A whole file's checks at its close. Locked.
  ptc::Status check_closed(const std::string& where);
  // ptc.json: a write into the writer's draft, and the draft's check at its close. Locked.
  ptc::Status write_draft(uint64_t writer, uint64_t off, const void* data, size_t len, const std::string& where);
  ptc::Status close_draft(uint64_t writer, const std::string& where);
  // A tensor file: parses its npy header once its first bytes are written, and gives the file
  // its blob (place). Locked.
  ptc::Status take_header(const std::string& where);
  // A tensor file kept in memory: a region of its shard's pack (known to be small) or a blob of
  // its own, with the bytes kept so far written there. Locked.
  ptc::Status place(const std::string& where);

  std::shared_ptr<PendingStep> step_;
};

class PendingStep : public std::enable_shared_from_this<PendingStep> {
 public:
  // `name`: the step's claim (Store::claim, kNewStep), held until the commit takes it or the
  // step is removed.
  PendingStep(std::string job, std::string step, int64_t created, Claim name = {})
      : job(std::move(job)), step(std::move(step)), created(created), claim(std::move(name)) {}

  const std::string job, step;
  const int64_t created;

  mutable std::mutex mu;                                         // guards everything below and the files' fields
  std::condition_variable released;                              // a whole file's handle was released
  std::shared_ptr<const void> stamp = std::make_shared<int>(0);  // new on every add or remove
  std::set<std::string> dirs;
  std::map<std::string, std::shared_ptr<PendingFile>> files;
  // The files of a stock DCP save, until its .metadata lands (daemon/save/dcp_staged.h).
  std::map<std::string, std::shared_ptr<DcpStagedFile>> staged;
  bool converting = false;  // its .metadata landed: the save becomes tensor files
  std::optional<ptc::Layout> layout;
  std::string ptc_text;      // of the parsed ptc.json
  uint64_t draft_bytes = 0;  // what the open drafts of ptc.json hold, together (kMaxDraftBytes at most)
  bool removed = false;
  bool committing = false;
  // Its blobs are finished (padding zeroed, synced, closed): a cluster commit of it was
  // prepared and then aborted, and the next try takes the same blobs (SaveService::take_back).
  bool sealed = false;
  std::string failure;         // a commit that failed: the step can only be removed
  Claim claim;                 // the step's name; moved into the change that commits it
  BlobStore* blobs = nullptr;  // where its files' blobs are made
  // Per shard: the blob that holds its small tensor files, and where the next one goes.
  struct Pack {
    std::shared_ptr<BlobWriter> blob;
    uint64_t next = 0;
  };
  std::map<ptc::ShardId, Pack> packs;

  // Frees the step's name (it is removed, or the save service stops).
  void release_name() {
    std::lock_guard lock(mu);
    claim.release();
  }

  std::string name() const { return job + "/" + step; }
  // Checks a file against the layout (when known) and records its error. Locked.
  ptc::Status check(PendingFile& f);
  // A writer's draft of ptc.json `f`, at its close: the first valid one becomes the file and the
  // layout, and every file is checked against it; a later one must say the same. Locked.
  ptc::Status take_ptc(PendingFile& f, const std::string& text);
  // The layout changed (ptc.json taken or removed): every file counted again. Locked.
  void recount();
  // A file changed (or was removed): its part of the tally brought up to date. Every change of
  // a file that complete() and part_complete() look at goes through here. Locked.
  void note(PendingFile& f);

  // ptc.json and every shard of the layout written in full and closed: O(log files), from the
  // tally (a close asks, and a step saved per tensor has 100,000s of files). Locked.
  bool complete() const;
  // In a cluster, this node's part: ptc.json written, every file closed and checked, and every
  // shard it has files of written in full (other shards may come from other nodes). Locked.
  bool part_complete() const;
  // The same two, from a pass over every file (what the commit goes by). Locked.
  bool complete_scan() const;
  bool part_complete_scan() const;
  // The shards of the layout this node has written in full (layout order). Locked.
  std::vector<bool> complete_shards() const;
  // Bytes of tensor data written, and the total the layout needs (0 before ptc.json). Locked.
  uint64_t bytes_written() const;
  uint64_t bytes_total() const;
  // Set by the save service: called (outside the lock) when the last writer of a file
  // closes it, so that a complete step gets committed.
  std::function<void(const std::shared_ptr<PendingStep>&)> on_closed;

 private:
  FileCount count_of(const PendingFile& f) const;
  void add(const FileCount& c, bool remove);
  bool shard_whole(size_t i) const {
    return tally_.done[i] == layout->slices(layout->shards()[i]).size() && tally_.short_of[i] == 0;
  }
  // Sums of every live file's FileCount, per shard where it says.
  struct Tally {
    size_t open = 0, failed = 0, unplaced = 0;
    std::vector<size_t> files, done, short_of;  // per shard of the layout
    size_t whole = 0;                           // shards written in full
    size_t broken = 0;                          // shards with files here, not written in full
  } tally_;
};

}  // namespace ptcfs
