// Blob files: the bytes of stored slices, under DATA/blobs/<16 hex digits>. A blob is
// written once, synced, then referred to by metadata; it is never modified afterwards.
// Blobs that no metadata refers to (left by a crash during an import) are removed by
// Store::open.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ptc/status.h"

namespace ptcfs {

// An open, read-only blob. The fd stays valid while the object lives.
class BlobFile {
 public:
  BlobFile(uint64_t id, int fd) : id_(id), fd_(fd) {}
  ~BlobFile();
  BlobFile(const BlobFile&) = delete;
  BlobFile& operator=(const BlobFile&) = delete;
  uint64_t id() const { return id_; }
  int fd() const { return fd_; }

 private:
  uint64_t id_;
  int fd_;
};

// A blob being written: sequential appends, then finish() syncs and closes it. Destroying
// an unfinished writer removes the file.
class BlobWriter {
 public:
  BlobWriter(uint64_t id, int fd, std::string path) : id_(id), fd_(fd), path_(std::move(path)) {}
  ~BlobWriter();
  BlobWriter(BlobWriter&&) noexcept;
  BlobWriter(const BlobWriter&) = delete;
  uint64_t id() const { return id_; }
  uint64_t size() const { return size_; }
  ptc::Status append(const void* data, size_t len);
  ptc::Status finish();

 private:
  uint64_t id_;
  int fd_;
  std::string path_;
  uint64_t size_ = 0;
  bool finished_ = false;
};

class BlobStore {
 public:
  // Creates DIR if missing.
  static ptc::Result<std::unique_ptr<BlobStore>> open(const std::string& dir);

  // A new blob with a fresh random id.
  ptc::Result<BlobWriter> create();
  // The open blob (cached).
  ptc::Result<std::shared_ptr<const BlobFile>> file(uint64_t id);
  ptc::Status remove(uint64_t id);
  ptc::Result<std::vector<uint64_t>> list() const;
  ptc::Result<uint64_t> size_of(uint64_t id) const;
  std::string path(uint64_t id) const;
  const std::string& dir() const { return dir_; }

 private:
  explicit BlobStore(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<const BlobFile>> open_;
};

}  // namespace ptcfs
