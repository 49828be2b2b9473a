// One immutable version of a stored step: its layout and, for every slice of every shard,
// the extents of blobs that hold its bytes, plus a checksum of those bytes.
//
// Metadata records (values are JSON):
//   step/<job>/<step>                      {"version": v, "created": unix seconds, "ptc": <ptc.json object>,
//                                           "origin": the change that committed it (origin()),
//                                           in a cluster also "nodes": [node ids in rank order],
//                                           "held": [names of the shards this node holds]}
//   slices/<job>/<step>/<v as 20 digits>/<shard>  {"<tensor>": {"x": [[blob, offset, len], ...], "h": xxh3}}
// The step record names the current version; writing it is the commit. Blob id 0 is the
// zero blob: an extent of it reads as zeros (padding) and has no file. "h" is present when
// the slice's checksum is known: import computes it; a slice remapped from extents of
// others has none until its bytes are read in full (a peer transfer hashes what it sends).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/store/blob_store.h"
#include "daemon/store/kv.h"
#include "fs/content.h"
#include "ptc/layout.h"

namespace ptcfs {

struct Extent {
  uint64_t blob = 0;
  uint64_t offset = 0;  // in the blob, of row 0
  uint64_t len = 0;     // bytes per row
  uint64_t stride = 0;  // blob bytes from one row to the next (slices of more than one row)
};

inline constexpr uint64_t kZeroBlob = 0;

// The bytes of a stored slice: `rows` rows, row r the concatenation of its extents, extent e
// holding blob bytes [e.offset + r * e.stride, + e.len). A slice of a tensor split along
// dimension k > 0 re-cut by a repartition keeps one row per index of the dimensions before
// k ("strided extents"), so its metadata grows with the pieces, not with the rows.
struct StoredSlice {
  std::vector<Extent> extents;
  std::optional<uint64_t> xxh3;  // of the slice's bytes, when known
  uint64_t rows = 1;
};

uint64_t row_bytes(const StoredSlice& s);
uint64_t slice_bytes(const StoredSlice& s);

// Calls fn(blob, blob_offset, n) for the pieces holding bytes [off, off + len) of the
// slice, in slice order; len must lie inside it.
void for_each_piece(const StoredSlice& s, uint64_t off, uint64_t len,
                    const std::function<void(uint64_t blob, uint64_t blob_off, uint64_t n)>& fn);

// Where the bytes of a slice go, piece by piece (walk_slice, StepVersion::pieces): runs of
// zeros (padding) and ranges of open blobs, in slice order.
class PieceSink {
 public:
  virtual ~PieceSink() = default;
  // `n` zero bytes (fs::zero_block() is their memory where one is needed).
  virtual Status zeros(uint64_t n) = 0;
  // Bytes [off, off + n) of `file`, as the slice's extents say. The sink checks they lie
  // inside the blob (a damaged blob may be shorter, and each reader words that its own way)
  // and takes them from its mapping (file->data(), null when it cannot be mapped) or its fd.
  virtual Status blob(const std::shared_ptr<const BlobFile>& file, uint64_t off, uint64_t n) = 0;

  // A piece of every row of a run of whole rows: `len` bytes at `off + r * stride` of `file` in
  // row r (no file: zeros).
  struct RowPiece {
    std::shared_ptr<const BlobFile> file;
    uint64_t off = 0, len = 0, stride = 0;
  };
  // Whether the sink takes whole rows at once (rows()); else walk_slice hands it every piece.
  virtual bool takes_rows() const { return false; }
  // `rows` whole rows of the slice, each the pieces in order: true when the sink took them,
  // false when it leaves them to walk_slice, which then hands it their pieces (blob() and
  // zeros(), which check them). Errors as blob().
  virtual Result<bool> rows(uint64_t rows, const std::vector<RowPiece>& pieces) {
    (void)rows;
    (void)pieces;
    return false;
  }
};

// A PieceSink that appends to a read buffer: zeros as padding segments, and each blob it is
// handed kept alive with the buffer. Subclasses check and add a blob's bytes (blob()).
class ReadBufferSink : public PieceSink {
 public:
  explicit ReadBufferSink(fs::ReadBuffer& out) : out_(out) {}
  Status zeros(uint64_t n) override {
    out_.add_zeros(n);
    return Status::ok();
  }

 protected:
  // The buffer itself.
  const fs::ReadBuffer& buffer() const { return out_; }
  fs::ReadBuffer& buffer() { return out_; }
  // The buffer, with `file` kept alive by it (once per run of pieces from one blob).
  fs::ReadBuffer& out(const std::shared_ptr<const BlobFile>& file) {
    if (file != kept_) {
      out_.keep(file);
      kept_ = file;
    }
    return out_;
  }

 private:
  fs::ReadBuffer& out_;
  std::shared_ptr<const BlobFile> kept_;
};

// Opens a blob for walk_slice.
using OpenBlob = std::function<Result<std::shared_ptr<const BlobFile>>(uint64_t id)>;

// The one read primitive: walks bytes [off, off + len) of `slice` (they lie inside it) into
// `sink`, opening each blob with `open` once. A sink that takes_rows() gets the whole rows of
// the range in one rows() call (a partial first or last row piece by piece, and the rows too
// when rows() leaves them), any other every piece of every row. Stops at the first error of
// `open` (kIo naming the blob) or of the sink, and returns it.
Status walk_slice(const StoredSlice& slice, uint64_t off, uint64_t len, const OpenBlob& open, PieceSink& sink);

// Where a version's shards live in a cluster: the nodes its ranks are placed on (ids, in
// rank order: docs/ARCHITECTURE.md "Concepts") and which of its shards this node holds. No nodes: a
// single node that holds every shard.
struct StepPlacement {
  std::vector<std::string> nodes;
  // The GPUs of each of `nodes` when the placement was made (ranks go on them in order; a
  // node that comes back with another count does not move them). Empty: the cluster's now
  // (versions committed before GPU counts were kept).
  std::vector<int> gpus;
  std::vector<bool> held;  // per shard of the layout; empty: all
  // Per shard of the layout, the ids of the nodes holding it, when that does not follow from
  // the rank placement: a step saved into the mounts of a cluster is held where it was written.
  // Empty: the rank placement of `nodes` says it (ptc/cluster.h).
  std::vector<std::vector<std::string>> holders;
  bool holds(size_t shard) const { return held.empty() || held[shard]; }
};

class StepVersion;

// Reads slices this node does not hold from a peer that does (daemon/cluster/peer_reader.h).
class RemoteSlices {
 public:
  virtual ~RemoteSlices() = default;
  // Appends bytes [off, off + len) of slice `slice` of `shard` of version v to out.
  virtual Status read(const StepVersion& v, const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
                      fs::ReadBuffer& out) const = 0;
};

// Thread-safety: immutable once made; every method may be called from many threads at once.
// Lifetime: a version borrows its BlobStore and its RemoteSlices (raw pointers). Both belong
// to the Store that loads or makes it (Store::new_version), which outlives every version it
// hands out: the daemon destroys its readers and services (the mount, the peer service)
// before the store.
class StepVersion final : public fs::StepContent {
 public:
  // `stored` has an empty list for every shard this node does not hold. Outside tests, made
  // by Store::new_version or load.
  StepVersion(std::string job, std::string step, uint64_t version, int64_t created, ptc::Layout layout,
              std::vector<std::vector<StoredSlice>> stored, BlobStore* blobs, StepPlacement placement = {},
              const RemoteSlices* remote = nullptr);

  const std::string& job() const { return job_; }
  const std::string& step() const { return step_; }
  // The identity of the change that committed this version, the same on every node of a cluster
  // (its transaction) and never reused: two steps saved under one name, or two versions of one
  // number, have different origins. Empty only for a version an older ptcfsd stored, or one not
  // committed yet. Set once by commit_change (daemon/store/prepared.h), before the version is
  // published: the one exception to "immutable once made".
  const std::string& origin() const override { return origin_; }
  void set_origin(std::string origin) { origin_ = std::move(origin); }
  const ptc::Layout& layout() const override { return layout_; }
  uint64_t version() const override { return version_; }
  int64_t mtime() const override { return created_; }
  Status read_slice(const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
                    fs::ReadBuffer& out) const override;

  // The stored slice of a shard this node holds.
  const StoredSlice& stored(const ptc::ShardId& shard, size_t slice) const;
  // Walks bytes [off, off + len) of a slice of a shard this node holds into `sink`
  // (walk_slice over this version's blobs). kInternal when the range passes the slice's end.
  Status pieces(const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len, PieceSink& sink) const;
  const StepPlacement& placement() const { return placement_; }
  // Unique among the versions of this process, where an address may be reused once one is
  // gone: what SlabDigests keeps a version's digests by, holding nothing of the version.
  uint64_t serial() const { return serial_; }
  bool holds(const ptc::ShardId& shard) const override { return placement_.holds(shard_index(shard)); }
  size_t shard_index(const ptc::ShardId& s) const;
  uint64_t total_bytes() const;  // of all stored slices (held here)
  // When a read (through the mount, or a peer's) last asked this version for bytes it holds, in
  // seconds since the epoch; 0: never. The S3 tier's disk budget evicts the least recently used
  // first.
  int64_t last_read() const { return last_read_.load(std::memory_order_relaxed); }
  std::vector<uint64_t> blobs_used() const;

  // Adds this version's records to a batch.
  void to_records(WriteBatch& batch) const;
  // Adds deletions of this version's slice records to a batch (not the step record).
  void delete_slice_records(WriteBatch& batch) const;
  // Loads the current version of a step from its step record value.
  static Result<std::shared_ptr<StepVersion>> load(KvStore& kv, const std::string& job, const std::string& step,
                                                   std::string_view step_record, BlobStore* blobs,
                                                   const RemoteSlices* remote = nullptr);

  static std::string meta_key(const std::string& job, const std::string& step);
  static constexpr std::string_view kStepPrefix = "step/";

 private:
  std::string job_, step_;
  uint64_t version_;
  int64_t created_;  // seconds since the epoch
  ptc::Layout layout_;
  std::vector<std::vector<StoredSlice>> stored_;  // like layout_.shards(), then slices
  BlobStore* blobs_;
  StepPlacement placement_;
  const RemoteSlices* remote_;
  uint64_t serial_;
  std::string origin_;
  mutable std::atomic<int64_t> last_read_{0};
  void touch() const;  // last_read_ = now
};

}  // namespace ptcfs
