// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// ({name: {"dtype", "shape", "data_offsets": [begin, end)}, optional "__metadata__":
// {string: string}}), then the data area. Offsets are relative to the data area.
//
// Parsing is strict: the header must fit in the file, be valid JSON of exactly that
// shape (no unknown member in an entry), name known dtypes, and the tensors' byte ranges
// must agree with dtype and shape, lie inside the data area, not overlap and cover it with
// no hole (as the reference implementation requires). Errors name the file and tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ptc/base/status.h"
#include "ptc/dtype.h"
#include "ptc/region.h"

namespace ptcfs::formats {

struct SafetensorsEntry {
  std::string name;
  ptc::DType dtype;
  ptc::Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data area
};

struct SafetensorsHeader {
  uint64_t header_len = 0;                      // N
  uint64_t data_start = 0;                      // 8 + N: file offset of the data area
  std::vector<SafetensorsEntry> entries;        // sorted by begin offset
  std::map<std::string, std::string> metadata;  // "__metadata__"
  const SafetensorsEntry* find(std::string_view name) const;
};

// Headers larger than this are refused (the reference implementation's limit is 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// Parses the header, given the first bytes of the file (`prefix`, which must hold at least
// 8 + N bytes; a shorter prefix is kCorrupt "truncated") and the file's total size.
// `file` names the file in error messages.
Result<SafetensorsHeader> parse_safetensors(std::string_view prefix, uint64_t file_size, const std::string& file);

// Reads just the 8-byte length from the start of a file; kCorrupt if it is absurd.
Result<uint64_t> safetensors_header_len(std::string_view first8, uint64_t file_size, const std::string& file);

// Reads bytes [offset, offset + len) of a file into buf; how many it got (fewer at its end).
using ReadAtFn = std::function<Result<size_t>(uint64_t offset, void* buf, size_t len)>;
// Reads the length, then the header, through `read` from a file of `file_size` bytes, and
// parses it. The reader's own errors pass through; the format's are kCorrupt.
Result<SafetensorsHeader> read_safetensors_header(uint64_t file_size, const ReadAtFn& read, const std::string& file);

// What a writer lays out: the header bytes (length prefix included, JSON padded with
// spaces to a multiple of 8 so that the data area is 8-aligned) and each tensor's range.
struct SafetensorsLayout {
  std::string header;                     // file bytes [0, data_start)
  std::vector<SafetensorsEntry> entries;  // in the order given, packed, no gaps
  uint64_t file_size() const;
};

struct TensorDecl {
  std::string name;
  ptc::DType dtype;
  ptc::Shape shape;
};

// Lays out a file holding `tensors` in the given order. Names must be unique (kInvalidArgument).
Result<SafetensorsLayout> layout_safetensors(const std::vector<TensorDecl>& tensors,
                                             const std::map<std::string, std::string>& metadata = {});

}  // namespace ptcfs::formats
