// One immutable version of a stored step: its layout and, for every slice of every shard,
// the extents of blobs that hold its bytes, plus a checksum of those bytes.
//
// Metadata records (values are JSON):
//   step/<job>/<step>                      {"version": v, "created": unix seconds, "ptc": <ptc.json object>}
//   slices/<job>/<step>/<v as 20 digits>/<shard>  {"<tensor>": {"x": [[blob, offset, len], ...], "h": xxh3}}
// The step record names the current version; writing it is the commit. Blob id 0 is the
// zero blob: an extent of it reads as zeros (padding) and has no file. "h" is present when
// the slice's checksum is known: import computes it; a slice remapped from extents of
// others has none until its bytes are read in full (a peer transfer hashes what it sends).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/blob_store.h"
#include "daemon/kv.h"
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

class StepVersion final : public fs::StepContent {
 public:
  StepVersion(std::string job, std::string step, uint64_t version, int64_t created, ptc::Layout layout,
              std::vector<std::vector<StoredSlice>> stored, BlobStore* blobs);

  const std::string& job() const { return job_; }
  const std::string& step() const { return step_; }
  const ptc::Layout& layout() const override { return layout_; }
  uint64_t version() const override { return version_; }
  int64_t mtime() const override { return created_; }
  ptc::Status read_slice(const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
                         fs::ReadBuffer& out) const override;

  const StoredSlice& stored(const ptc::ShardId& shard, size_t slice) const;
  uint64_t total_bytes() const;  // of all stored slices
  std::vector<uint64_t> blobs_used() const;

  // Adds this version's records to a batch.
  void to_records(WriteBatch& batch) const;
  // Adds deletions of this version's slice records to a batch (not the step record).
  void delete_slice_records(WriteBatch& batch) const;
  // Loads the current version of a step from its step record value.
  static ptc::Result<std::shared_ptr<StepVersion>> load(KvStore& kv, const std::string& job,
                                                        const std::string& step,
                                                        std::string_view step_record, BlobStore* blobs);

  static std::string step_key(const std::string& job, const std::string& step);
  static constexpr std::string_view kStepPrefix = "step/";

 private:
  size_t shard_index(const ptc::ShardId& s) const;
  std::string job_, step_;
  uint64_t version_;
  int64_t created_;  // seconds since the epoch
  ptc::Layout layout_;
  std::vector<std::vector<StoredSlice>> stored_;  // like layout_.shards(), then slices
  BlobStore* blobs_;
};

}  // namespace ptcfs
