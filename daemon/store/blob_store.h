// Blob files: the bytes of stored slices, under DATA/blobs/<16 hex digits>. A blob is
// written once, synced, then referred to by metadata; it is never modified afterwards.
// Blobs that no metadata refers to (left by a crash during an import) are removed by
// Store::open.
//
// A blob may be evicted (the S3 tier's disk budget, docs/OPERATIONS.md "A disk budget"): its
// file goes, and the next file() of it fetches it back through the refill function before it
// opens it; readers never see the difference, but for the wait.
//
// Errors: a failed system call is kIo naming the blob's path and errno's text; a full disk
// while writing is kResourceExhausted (write_at); create() is kInternal only if no fresh id
// could be drawn; file() of an evicted blob fails as its refill does.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs {

// An open, read-only blob. The fd stays valid while the object lives.
class BlobFile {
 public:
  BlobFile(uint64_t id, int fd, uint64_t size) : id_(id), fd_(fd), size_(size) {}
  ~BlobFile();
  BlobFile(const BlobFile&) = delete;
  BlobFile& operator=(const BlobFile&) = delete;
  uint64_t id() const { return id_; }
  int fd() const { return fd_; }
  // Its size when opened (blobs never change).
  uint64_t size() const { return size_; }
  // The whole blob mapped read-only (mapped on first use; blobs never change), or nullptr
  // when it cannot be mapped.
  const std::byte* data() const;
  // Bytes mapped by data() (the blob's size; 0 before data() or when it could not map).
  uint64_t mapped_size() const { return data() ? map_len_ : 0; }

 private:
  uint64_t id_;
  int fd_;
  uint64_t size_;
  mutable std::once_flag mapped_;
  mutable const std::byte* map_ = nullptr;
  mutable size_t map_len_ = 0;
};

class BlobStore;

// A blob being written: appends (or positioned writes), then finish() syncs and closes it.
// Every write of 4 MiB or more starts writeback of its range (sync_file_range), so the disk works while the
// writer goes on, and finish()'s fsync has little left to wait for.
// Destroying an unfinished writer removes the file.
class BlobWriter {
 public:
  BlobWriter(BlobStore* store, uint64_t id, int fd, std::string path)
      : store_(store), id_(id), fd_(fd), path_(std::move(path)) {}
  ~BlobWriter();
  BlobWriter(BlobWriter&&) noexcept;
  BlobWriter(const BlobWriter&) = delete;
  uint64_t id() const { return id_; }
  uint64_t size() const { return size_; }
  Status append(const void* data, size_t len);
  // Writes at an offset; safe from several threads at once for disjoint ranges. A full
  // disk is kResourceExhausted (ENOSPC at the mount).
  Status write_at(uint64_t offset, const void* data, size_t len) const;
  // Starts writeback of [offset, offset + len) when it is 4 MiB or more, as write_at does for
  // one large write: for a range written in smaller pieces.
  void start_writeback(uint64_t offset, uint64_t len) const;
  // Reads back what was written (fewer bytes past the end); before finish() only.
  Result<size_t> read_at(uint64_t offset, void* data, size_t len) const;
  // Syncs and closes the blob (it stays when the writer goes). Again: nothing.
  Status finish();
  bool finished() const { return finished_; }

 private:
  BlobStore* store_;
  uint64_t id_;
  int fd_;
  std::string path_;
  uint64_t size_ = 0;
  bool finished_ = false;
};

class BlobStore {
 public:
  // Creates DIR if missing.
  static Result<std::unique_ptr<BlobStore>> open(const std::string& dir);

  // A new blob with a fresh random id. It stays pending (garbage collection leaves it
  // alone) until settle(id) is called, after its metadata is committed or it is removed.
  Result<BlobWriter> create();
  void settle(uint64_t id);
  // Marks an existing blob pending again (a prepared change restored after a restart).
  void hold_pending(uint64_t id);
  bool is_pending(uint64_t id) const;
  // The open blob (cached). An evicted one is fetched back first (one refill at a time per
  // blob; readers of it wait for that one, and fail with it).
  Result<std::shared_ptr<const BlobFile>> file(uint64_t id);
  Status remove(uint64_t id);
  // The blobs with a file (evicted ones are not listed).
  Result<std::vector<uint64_t>> list() const;
  Result<uint64_t> size_of(uint64_t id) const;  // an evicted blob's: its size when evicted
  std::string path(uint64_t id) const;
  const std::string& dir() const { return dir_; }

  // Writes an evicted blob's file at path(id) again (renamed into place once whole), or fails.
  using Refill = std::function<Status(uint64_t id)>;
  // Set by the S3 tier; null: evicted blobs cannot be read (kUnavailable).
  void set_refill(std::shared_ptr<const Refill> refill);
  // Removes the blob's file and remembers it evicted, `size` bytes, at once for every reader: a
  // file() from now on fetches it back (readers holding the open file keep it).
  Status evict(uint64_t id, uint64_t size);
  // Remembers a blob evicted by an earlier run (its file is gone).
  void note_evicted(uint64_t id, uint64_t size);
  // A new blob of `size` bytes that was never here: a fresh id, evicted from the start (its
  // bytes are in the durable copy; the first file() fetches them) and pending, as create()'s.
  Result<uint64_t> create_evicted(uint64_t size);
  bool is_evicted(uint64_t id) const;
  std::vector<uint64_t> evicted() const;

 private:
  explicit BlobStore(std::string dir) : dir_(std::move(dir)) {}
  Result<std::shared_ptr<const BlobFile>> open_locked(uint64_t id);
  std::string dir_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<const BlobFile>> open_;
  std::unordered_set<uint64_t> pending_;
  std::unordered_map<uint64_t, uint64_t> evicted_;  // id -> size
  struct Refilling {
    std::mutex m;                  // held by the reader fetching the blob back
    uint64_t tries = 0;            // guarded by mu_, as is:
    Status failed = Status::ok();  // the last try's outcome
  };
  std::unordered_map<uint64_t, std::shared_ptr<Refilling>> refills_;  // one refill at a time per blob
  std::shared_ptr<const Refill> refill_;
};

}  // namespace ptcfs
