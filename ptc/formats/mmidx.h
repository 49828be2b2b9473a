// Megatron indexed datasets (the MMIDIDX layout of megatron/core/datasets/indexed_dataset.py),
// read from an .idx file's bytes and written for the per-rank views. Pure: no I/O.
//
// .idx, all little-endian:
//   9 bytes "MMIDIDX\0\0", u64 version (1), u8 dtype code, u64 sequence count n,
//   u64 document count m, i32 sequence_lengths[n] (in elements), i64 sequence_pointers[n]
//   (byte offsets into .bin), i64 document_indices[m] (0, then the end of each document,
//   as a sequence index, the last being n).
// .bin: the sequences' elements; sequence i is bin[pointer_i, pointer_i + length_i * itemsize).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::formats {

inline constexpr uint64_t kMmidxHeaderBytes = 34;

// Bytes per element of a dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
// 7 float32, 8 uint16); 0 for an unknown code.
int mmidx_itemsize(int code);
const char* mmidx_dtype_name(int code);

struct MmidxIndex {
  int dtype_code = 0;
  std::vector<uint64_t> offsets;  // per sequence, in .bin
  std::vector<uint64_t> bytes;    // per sequence
  uint64_t documents = 0;
};

// Parses and validates an .idx file's bytes against its .bin's size: header, version,
// dtype, exact file size, no negative length or pointer, every sequence inside .bin,
// document indices rising from 0 to n. `file` names it in errors.
Result<MmidxIndex> parse_mmidx(std::string_view idx, uint64_t bin_size, const std::string& file);

// The .idx of sequences of the given byte sizes stored back to back, one document each.
// Every size is a multiple of the itemsize.
std::string render_mmidx(int dtype_code, const std::vector<uint64_t>& bytes);
// Its size, without building it.
uint64_t mmidx_size(uint64_t sequences);

}  // namespace ptcfs::formats
