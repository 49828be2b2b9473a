// The records a stored dataset is made of: its source files and its sample table (24 bytes
// per sample, little-endian, as stored in the table blob; docs/FORMATS.md "Metadata").
// Written by indexing (daemon/dataset/dataset_index.h), read by DatasetVersion.
#pragma once

#include <cstdint>
#include <string>

namespace ptcfs {

struct SourceFile {
  std::string path;  // absolute
  uint64_t size = 0;
  int64_t mtime_ns = 0;  // when indexed: a file that changes afterwards is refused at read
  uint64_t blob = 0;     // non-zero when its bytes were copied into the store (--copy)
};

// One entry of the sample table, as stored (24 bytes, little-endian).
struct SampleRecord {
  uint64_t offset = 0;  // in its file
  uint64_t bytes = 0;   // in the file (a JSONL line with its '\n' when it has one)
  uint32_t file = 0;
  uint32_t flags = 0;  // kSupplyNewline
};
static_assert(sizeof(SampleRecord) == 24);
inline constexpr uint32_t kSupplyNewline = 1;

inline uint64_t record_bytes(const SampleRecord& r) { return r.bytes + ((r.flags & kSupplyNewline) ? 1 : 0); }

}  // namespace ptcfs
