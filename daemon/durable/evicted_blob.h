// A blob evicted under the S3 tier's disk budget (docs/OPERATIONS.md "A disk budget"), as pure
// data: where its bytes lie in the durable copy, and its record in the node's metadata
// (`evicted/<16 hex digits>`), kept until the blob is fetched back.
//
// A step's durable copy holds each shard as a rank file (the `ptcfs export` format). When the
// copy is of the version a node serves (the same origin, so the same layout and bytes), every
// byte that version stores in a blob is also at a known offset of one of those files: the
// slice's range in the file's data area, plus the byte's place in the slice.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs {
class StepVersion;
}

namespace ptcfs::durable {

// Blob bytes [blob_off, blob_off + len) are object `object` (relative to the tier's prefix)
// bytes [object_off, object_off + len).
struct CopyRange {
  uint64_t blob_off = 0, len = 0;
  std::string object;
  uint64_t object_off = 0;
  bool operator==(const CopyRange& o) const {
    return blob_off == o.blob_off && len == o.len && object == o.object && object_off == o.object_off;
  }
};

struct EvictedBlob {
  uint64_t blob = 0;
  uint64_t size = 0;              // the blob file's size when evicted
  uint64_t xxh3 = 0;              // XXH3-64 of the ranges' bytes, taken in blob order
  std::vector<CopyRange> ranges;  // in blob order, none overlapping (merge_ranges)
  uint64_t covered() const;       // bytes the ranges hold
};

inline constexpr std::string_view kEvictedPrefix = "evicted/";
std::string evicted_key(uint64_t blob);
std::string evicted_json(const EvictedBlob& e);
// kCorrupt naming `where` and the member at fault.
Result<EvictedBlob> evicted_from_json(std::string_view text, const std::string& where);

// Appends, by blob, where the bytes of every slice `v` stores lie in its durable copy under
// `dir` (the step's folder in the tier, durable_plan.h step_prefix). Zeros stored as no blob are
// skipped. kInternal when a shard's file cannot be laid out.
Status copy_ranges(const StepVersion& v, const std::string& dir, std::map<uint64_t, std::vector<CopyRange>>& out);

// A blob's ranges sorted by blob offset, bytes named twice kept once (two versions sharing a
// blob, or two slices of one), and neighbours that are neighbours in one object joined (one GET
// each).
std::vector<CopyRange> merge_ranges(std::vector<CopyRange> ranges);

}  // namespace ptcfs::durable
