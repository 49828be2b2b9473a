// libptcfs_client, C++: read a file of a ptcfs mount without FUSE, through the node's direct
// socket (daemon/direct/direct_server.h). The daemon passes read-only descriptors of the files
// that hold the bytes (blobs, dataset files, a sealed memfd for bytes only it has); this class
// maps them, so reading is reading memory the page cache already holds.
//
// Ownership: a DirectFile owns its connection to the daemon (the daemon keeps the file's
// version, and its blobs, while the connection is open, even across a repartition) and its
// mappings. Every pointer it returns is valid until it is destroyed. Mappings are private and
// writable (copy-on-write): writing through a pointer changes this process's copy only.
// Thread-safety: once open, the const methods may be called from many threads at once;
// bytes() is not concurrent with itself.
//
// The C interface for other languages is transport/ptcfs_client.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::client {

// The direct socket that serves `path`: $PTCFS_DIRECT_SOCKET when set, else the content of the
// mount's hidden file MNT/.ptcfs-direct (the mount root: the topmost folder above `path` on the
// same device). kUnavailable when there is none (not a ptcfs mount, a daemon without the
// socket).
ptc::Result<std::string> find_socket(const std::string& path);

class DirectFile {
 public:
  struct Span {
    const std::byte* data;  // nullptr: `len` zero bytes
    uint64_t len;
    uint32_t source = 0;  // which mapped file holds the bytes: spans of one source lie in one mapping
  };

  // Opens `path` (a file of a ptcfs mount; relative paths are made absolute) through `socket`
  // (empty: find_socket). Errors name the path and say what is wrong: kUnavailable when there
  // is no direct socket (read through the mount instead), kNotFound, kInvalidArgument (a
  // folder, a path outside the mount), kPermissionDenied (another uid), kCorrupt (a blob
  // shorter than the map says: detected before anything is mapped).
  static ptc::Result<std::unique_ptr<DirectFile>> open(const std::string& path, const std::string& socket = "");
  ~DirectFile();
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;

  uint64_t size() const { return size_; }
  uint64_t version() const { return version_; }  // of the step or dataset it reads (0: none)
  // The file's bytes in order, as (pointer, length) spans.
  const std::vector<Span>& spans() const { return spans_; }
  // A pointer to bytes [off, off + len) when they lie in one mapped span (zero-copy), else nullptr.
  const std::byte* contiguous(uint64_t off, uint64_t len) const;
  // Copies bytes [off, off + len) into dst; kOutOfRange past the end.
  ptc::Status read(uint64_t off, uint64_t len, void* dst) const;
  // The whole file in one buffer: the mapping itself when the file is one span, else a
  // gathered copy made on the first call.
  ptc::Result<const std::byte*> bytes();

 private:
  DirectFile() = default;
  int sock_ = -1;
  uint64_t size_ = 0, version_ = 0;
  std::vector<std::pair<void*, size_t>> maps_;
  std::vector<Span> spans_;
  std::vector<uint64_t> starts_;  // file offset of each span
  std::vector<std::byte> gathered_;
};

}  // namespace ptcfs::client
