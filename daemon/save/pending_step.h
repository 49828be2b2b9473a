// A step being saved through the mount (docs/FORMATS.md "Saving into the mount"): the files
// written into MNT/<job>/<step>/ so far, each straight into the blob that will hold it.
//
//   ptc.json                      kept in memory (at most 64 MiB), one writer; parsed when closed
//   tp{t}-pp{p}.safetensors       a whole shard, one writer front to back; checked against
//                                 ptc.json with import's rules when closed
//   tp{t}-pp{p}/<tensor>.npy      one tensor of a shard; several writers may write disjoint
//                                 ranges (pwrite); its header is checked as soon as written
//
// A file written whole (ptc.json, a shard file) has at most one handle open for writing, so
// that two writers never mix their bytes into one file: another open for writing is refused
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

namespace ptcfs {

class PendingStep;

class PendingFile final : public fs::WriteFile {
 public:
  enum class Kind { kPtcJson, kShard, kTensor };

  PendingFile(std::shared_ptr<PendingStep> step, Kind kind, std::string rel, ptc::ShardId shard, std::string tensor,
              std::optional<BlobWriter> blob);

  uint64_t size() const override;
  ptc::Result<uint64_t> open_writer() override;
  ptc::Status write(uint64_t writer, uint64_t off, const void* data, size_t len) override;
  ptc::Status truncate(uint64_t writer, uint64_t size) override;
  ptc::Status flush(uint64_t writer) override;
  void release(uint64_t writer) override;

  // The rest is used under the step's lock (PendingStep::mu).
  Kind kind;
  std::string rel;     // in the step's folder
  ptc::ShardId shard;  // kShard, kTensor
  std::string tensor;  // kTensor
  std::string text;    // kPtcJson
  std::optional<BlobWriter> blob;
  ByteRanges written;
  uint64_t end = 0;             // the file's size: the largest end of a write or truncate
  int writers = 0;              // handles open for writing
  uint64_t last_writer = 0;     // ids given to them: 1, 2, ...
  uint64_t owner = 0;           // a whole file's one open handle (0: none)
  bool owner_closed = false;    // it was closed (flushed) and not written since: its release is coming
  bool error_at_close = false;  // `error` was found by that close (void if the writer writes again)
  bool dead = false;            // unlinked, or its step removed
  // Known once the header is written (and, for a shard, the file closed): where the data
  // starts and the size the header declares.
  std::optional<uint64_t> expected;
  ptc::SafetensorsHeader header;       // kShard
  ptc::NpyHeader npy;                  // kTensor
  std::vector<size_t> entry_of_slice;  // kShard, once checked against the layout
  std::string error;                   // why the file contradicts ptc.json or itself ("" if it does not)

  // ptc.json or a shard file: written whole, by one writer at a time.
  bool whole() const { return kind != Kind::kTensor; }
  // Written in full, closed, and (with the layout known) checked.
  bool complete() const;
  // Data bytes written (for `ls`).
  uint64_t data_written() const;

 private:
  // A whole file's checks at its close. Locked.
  ptc::Status check_closed(const std::string& where);

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
  std::optional<ptc::Layout> layout;
  std::string ptc_text;  // of the parsed ptc.json
  bool removed = false;
  bool committing = false;
  std::string failure;  // a commit that failed: the step can only be removed
  Claim claim;          // the step's name; moved into the change that commits it

  // Frees the step's name (it is removed, or the save service stops).
  void release_name() {
    std::lock_guard lock(mu);
    claim.release();
  }

  std::string name() const { return job + "/" + step; }
  // Checks a file against the layout (when known) and records its error. Locked.
  ptc::Status check(PendingFile& f);
  // Parses ptc.json (closed by its last writer) and checks every file against it. Locked.
  ptc::Status take_ptc(PendingFile& f);
  // ptc.json and every shard of the layout written in full and closed. Locked.
  bool complete() const;
  // In a cluster, this node's part: ptc.json written, every file closed and checked, and every
  // shard it has files of written in full (other shards may come from other nodes). Locked.
  bool part_complete() const;
  // The shards of the layout this node has written in full (layout order). Locked.
  std::vector<bool> complete_shards() const;
  // Bytes of tensor data written, and the total the layout needs (0 before ptc.json). Locked.
  uint64_t bytes_written() const;
  uint64_t bytes_total() const;
  // Set by the save service: called (outside the lock) when the last writer of a file
  // closes it, so that a complete step gets committed.
  std::function<void(const std::shared_ptr<PendingStep>&)> on_closed;
};

}  // namespace ptcfs
