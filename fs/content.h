// What the filesystem needs from the node, as small interfaces that daemon/ implements
// over its store (fs/ knows nothing of RocksDB or blobs).
//
// A StepContent is one immutable version of a step: its layout and the bytes of every
// stored slice. The filesystem keeps a shared_ptr to the version a file was opened on, so
// a reader keeps reading that version after a later repartition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fs/read_buffer.h"
#include "ptc/base/status.h"
#include "ptc/dataset.h"
#include "ptc/layout.h"

namespace ptcfs::fs {

// Thread-safety: immutable once built; every method may be called from many threads at once
// (FUSE workers, the direct server). Errors of read_slice: kIo naming the blob, kCorrupt when a
// blob is shorter than its extents, kUnavailable when a peer that holds the slice cannot be
// reached; the filesystem turns them into errno at its boundary (fs/errno_map.h).
class StepContent {
 public:
  virtual ~StepContent() = default;
  virtual const ptc::Layout& layout() const = 0;
  // Increases with every new version of the same step.
  virtual uint64_t version() const = 0;
  // The identity of the change that committed this version (empty where unknown). Two versions
  // of one number differ in it (the step removed and saved again under its name), and so do the
  // inodes of their files: the kernel never serves one's cached pages for the other's.
  virtual const std::string& origin() const {
    static const std::string none;
    return none;
  }
  // When this version was committed, in seconds since the epoch (the files' mtime).
  virtual int64_t mtime() const = 0;
  // Appends bytes [off, off + len) of the stored slice `slice` (an index into
  // layout().slices(shard)) to out. The range lies inside the slice.
  virtual Status read_slice(const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
                            ReadBuffer& out) const = 0;
  // Whether this node holds a shard's bytes (a read of another's goes to a peer); one node
  // holds them all.
  virtual bool holds(const ptc::ShardId& /*shard*/) const { return true; }
};

struct StepEntry {
  std::string job, step;
  std::shared_ptr<const StepContent> content;
};

// One immutable version of a dataset (ptc/dataset.h): its spec, its position, and the
// bytes of its records. A record is what a rank view holds per sample: for JSONL the line
// with its newline (one is supplied when the file's last line lacks it), for Megatron the
// sequence's elements.
// Thread-safety and errors: as StepContent (immutable, read from many threads at once).
class DatasetContent {
 public:
  virtual ~DatasetContent() = default;
  virtual const ptc::DatasetSpec& spec() const = 0;
  virtual const ptc::DatasetPosition& position() const = 0;
  // Megatron datasets: the MMIDIDX dtype code of every sequence.
  virtual int dtype_code() const = 0;
  virtual uint64_t version() const = 0;
  virtual int64_t mtime() const = 0;
  // The sample order of the current epoch (computed once per version).
  virtual const std::vector<uint32_t>& order() const = 0;
  virtual uint64_t record_bytes(uint32_t sample) const = 0;

  struct Piece {
    uint32_t sample = 0;
    uint64_t off = 0, len = 0;  // inside the record
  };
  // Appends the bytes of each piece, in order.
  virtual Status read_records(const std::vector<Piece>& pieces, ReadBuffer& out) const = 0;
};

struct DatasetEntry {
  std::string job, name;
  std::shared_ptr<const DatasetContent> content;
};

// A file of a pending step, written through the mount (docs/FORMATS.md "Saving into the mount").
// The daemon's save path implements it; the filesystem passes it each writer's requests, naming
// the writer (the id open_writer gave its handle).
// Thread-safety: every method may be called concurrently (several writers of one file).
class WriteFile {
 public:
  virtual ~WriteFile() = default;
  // Bytes written so far extend the file to this size (the largest end of a write or truncate).
  virtual uint64_t size() const = 0;
  // One more writer opens the file: its id, which its writes, truncates, flushes and release
  // pass (each open is matched by one release()). A file written whole, front to back
  // (ptc.json, tp{t}-pp{p}.safetensors), has one writer at a time: kFailedPrecondition
  // (EBUSY) while another writer has it open and has not closed it.
  virtual Result<uint64_t> open_writer() = 0;
  virtual Status write(uint64_t writer, uint64_t off, const void* data, size_t len) = 0;
  // ftruncate, or open with O_TRUNC; writer 0 is truncate(2) by path, through no handle.
  virtual Status truncate(uint64_t writer, uint64_t size) = 0;
  // close(): what is known to contradict ptc.json is reported here (close() returns it).
  virtual Status flush(uint64_t writer) = 0;
  // The last reference of one writer's handle went.
  virtual void release(uint64_t writer) = 0;
  // Whether the file's step is committing or committed: the mount's next tree shows it as a
  // committed file (with another inode), so a reader waits for that tree.
  virtual bool committing() const { return false; }
};

// What the filesystem needs to take writes: the node's pending steps. `rel` is a path
// inside the step's folder ("ptc.json", "tp0-pp1.safetensors", "tp0-pp1/<tensor>.npy").
// Thread-safety: every method may be called from many FUSE workers at once. Errors: kAlreadyExists
// (EEXIST), kInvalidArgument (a name or file that contradicts ptc.json: EINVAL), kNotFound,
// kFailedPrecondition (EBUSY: a second writer of a whole file), kIo; each names the path.
class WriteTarget {
 public:
  virtual ~WriteTarget() = default;
  virtual Status make_job(const std::string& job) = 0;                            // mkdir MNT/<job>
  virtual Status make_step(const std::string& job, const std::string& step) = 0;  // mkdir MNT/<job>/<step>
  virtual Status make_dir(const std::string& job, const std::string& step, const std::string& rel) = 0;
  // A new file, not yet open: its creator opens it (open_writer) like any other writer.
  virtual Result<std::shared_ptr<WriteFile>> create(const std::string& job, const std::string& step,
                                                    const std::string& rel) = 0;
  virtual Status unlink(const std::string& job, const std::string& step, const std::string& rel) = 0;
  // rename(2) of `from` to `to`, both in the step's folder: a stock DCP save's .metadata.tmp to
  // .metadata, which makes the save the step's tensors (docs/FORMATS.md "Stock dcp.save into the
  // mount"), or a stock save_pretrained's temporary to its safetensors name; any other is
  // kPermissionDenied (files are written in place). True when the rename committed the step: the
  // mount then shows it committed before the rename returns.
  virtual Result<bool> rename(const std::string& job, const std::string& step, const std::string& from,
                              const std::string& to) = 0;
};

// A step being saved: the folders and files written into it so far.
struct PendingEntry {
  std::string job, step;
  int64_t mtime = 0;
  std::shared_ptr<const void> stamp;  // a new one whenever a folder or file is added or removed
  std::vector<std::string> dirs;      // relative paths
  std::vector<std::pair<std::string, std::shared_ptr<WriteFile>>> files;
};

// Everything the mount shows.
struct Contents {
  std::vector<StepEntry> steps;
  std::vector<DatasetEntry> datasets;
  std::vector<PendingEntry> pending;
  std::vector<std::string> jobs;  // jobs made by mkdir that have no step yet
  // The direct socket's path, the content of the hidden file MNT/.ptcfs-direct (fs/tree.h);
  // empty: no such file.
  std::string direct_socket;
  // The size past which a step's hf/ view starts a new safetensors file (fs/hf_views.h).
  uint64_t hf_shard_bytes = 5'000'000'000;
};

}  // namespace ptcfs::fs
