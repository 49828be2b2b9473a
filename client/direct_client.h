// libptcfs_client, C++: read a file of a ptcfs mount without FUSE, through the node's direct
// socket (daemon/direct/direct_server.h). The daemon passes read-only descriptors of the files
// that hold the bytes (blobs, dataset files, a sealed memfd for bytes only it has); this class
// maps them, so reading is reading memory the page cache already holds.
//
// Ownership: a DirectFile owns its connection to the daemon (the daemon keeps the file's
// version, and its blobs, while the connection is open, even across a repartition), its
// mappings, and the descriptors of the mapped files (fd(); the daemon does not track them).
// Every pointer it returns is valid until it is destroyed. Mappings are private and
// writable (copy-on-write): writing through a pointer changes this process's copy only.
// Thread-safety: once open, the const methods may be called from many threads at once;
// bytes() is not concurrent with itself.
//
// The daemon sends the map as runs of rows (map version 2, transport/direct_protocol.h), so that
// a slice a repartition left strided costs one record per tensor on the wire and here, and its
// bytes are gathered by walking its rows (read, read_many).
//
// The C interface for other languages is client/ptcfs_client.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::client {

// The direct socket that serves `path`: $PTCFS_DIRECT_SOCKET when set, else the content of the
// mount's hidden file MNT/.ptcfs-direct (the mount root: the topmost folder above `path` on the
// same device). kUnavailable when there is none (not a ptcfs mount, a daemon without the
// socket).
Result<std::string> find_socket(const std::string& path);

class DirectFile {
 public:
  struct Span {
    const std::byte* data;  // nullptr: `len` zero bytes
    uint64_t len;
    uint32_t source = 0;  // which mapped file holds the bytes: spans of one source lie in one mapping
  };
  // A file that holds bytes of this one, mapped whole (an empty file: nullptr, 0).
  struct Mapping {
    const std::byte* data;
    uint64_t len;
  };
  // Where a range lies when one mapped piece holds all of it: the mapping and the offset there.
  struct Location {
    int64_t mapping = -1;  // -1: no one mapped piece holds it (an empty range, zeros, several pieces)
    uint64_t at = 0;
  };

  // Opens `path` (a file of a ptcfs mount; relative paths are made absolute) through `socket`
  // (empty: find_socket). Errors name the path and say what is wrong: kUnavailable when there
  // is no direct socket (read through the mount instead), kNotFound, kInvalidArgument (a
  // folder, a path outside the mount), kPermissionDenied (another uid), kCorrupt (a blob
  // shorter than the map says: detected before anything is mapped).
  static Result<std::unique_ptr<DirectFile>> open(const std::string& path, const std::string& socket = "");
  ~DirectFile();
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;

  uint64_t size() const { return size_; }
  uint64_t version() const { return version_; }  // of the step or dataset it reads (0: none)
  // The file's bytes in order, as (pointer, length) spans: every piece of every row of the map,
  // adjacent ones merged (made on the first call: a slice a repartition left strided is one span
  // per piece of each row, where the map itself keeps one run of rows).
  const std::vector<Span>& spans() const;
  // The files that hold the bytes, mapped whole; mapping i is the `source` of the spans it holds.
  const std::vector<Mapping>& mappings() const { return maps_; }
  // The read-only descriptor of the file mapped as `mapping` (< mappings().size()), open until
  // this is destroyed: the same bytes by pread (client/gpu/upload.h stages from it).
  int fd(size_t mapping) const { return fds_[mapping]; }
  // A pointer to bytes [off, off + len) when they lie in one mapped piece (zero-copy), else nullptr.
  const std::byte* contiguous(uint64_t off, uint64_t len) const;
  // Copies bytes [off, off + len) into dst; kOutOfRange past the end.
  Status read(uint64_t off, uint64_t len, void* dst) const;
  // The Location of each range [off[k], off[k] + len[k]), k < n, in one pass (ranges in file order
  // cost a step each, others a binary search). kOutOfRange naming the first range past the end.
  Status locate(size_t n, const uint64_t* off, const uint64_t* len, Location* out) const;
  // Copies each range [off[k], off[k] + len[k]) into dst[k]: one call gathers every strided
  // tensor of a shard, the map's rows walked here. Destinations that follow one another (gaps
  // under 4 KiB) and come to 4 MiB or more have their pages, gaps included, populated 2 MiB at a
  // time ahead of the copy (a fresh buffer then takes no fault per page). kOutOfRange as locate,
  // before any copy.
  Status read_many(size_t n, const uint64_t* off, const uint64_t* len, void* const* dst) const;
  // The whole file in one buffer: the mapping itself when the file is one span, else a
  // gathered copy made on the first call.
  Result<const std::byte*> bytes();

 private:
  // The map (transport/direct_protocol.h RunMap, version 2): run i holds file bytes [start,
  // start + rows * row_bytes), row r the pieces [first, first + count) in order, piece j's part
  // of row r at data + r * stride (data nullptr: zeros). Runs hold at least one byte.
  struct Piece {
    const std::byte* data;
    uint64_t len, stride;
    uint32_t source;
  };
  struct Run {
    uint64_t start, rows, row_bytes;
    uint32_t first, count;
  };

  DirectFile() = default;
  // The run holding byte `off` (< size_), trying run `hint` and the next first: ranges met in
  // file order cost one step each.
  size_t run_at(uint64_t off, size_t hint) const;
  // The piece holding all of [off, off + len) (len > 0, inside the file), starting the search at
  // run `hint` (updated), and where off lies in its mapping (nullptr for zeros); nullptr when the
  // range crosses pieces.
  const Piece* piece_of(uint64_t off, uint64_t len, size_t& hint, const std::byte** at) const;
  // Copies [off, off + len) (inside the file) to dst, from run `hint` on; returns the last run read.
  size_t copy(uint64_t off, uint64_t len, std::byte* dst, size_t hint) const;
  // Copies n bytes of row `row` of run r from byte `pos` of the row (n <= row_bytes - pos) to
  // dst; returns the end of what it wrote.
  std::byte* copy_row(const Run& r, uint64_t row, uint64_t pos, uint64_t n, std::byte* dst) const;
  // kOutOfRange naming the first range past the end (and its index, of several).
  Status check_ranges(size_t n, const uint64_t* off, const uint64_t* len) const;

  int sock_ = -1;
  uint64_t size_ = 0, version_ = 0;
  std::vector<Mapping> maps_;  // by source; unmapped when destroyed
  std::vector<int> fds_;       // by source; closed when destroyed
  std::vector<Run> runs_;
  std::vector<uint64_t> starts_;  // runs_[i].start, for the binary search
  std::vector<Piece> pieces_;
  mutable std::once_flag spans_once_;
  mutable std::vector<Span> spans_;
  std::vector<std::byte> gathered_;
};

}  // namespace ptcfs::client
