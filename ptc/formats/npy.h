// The .npy format, version 1.0: magic "\x93NUMPY", version bytes 1 0, a little-endian u16
// header length, then a Python dict literal
// "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }" padded with spaces and
// ended by '\n' so that the data starts at a multiple of 64 bytes, then the data in C order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ptc/base/status.h"
#include "ptc/dtype.h"
#include "ptc/region.h"

namespace ptcfs::formats {

// The header bytes (everything before the data) for an array of dtype and shape.
// A header that would not fit in v1.0's u16 length uses version 2.0 (u32 length).
std::string npy_header(ptc::DType dtype, const ptc::Shape& shape);

struct NpyHeader {
  std::string descr;  // e.g. "<f4"
  bool fortran_order = false;
  ptc::Shape shape;
  uint64_t data_start = 0;
  uint64_t data_bytes = 0;  // shape * itemsize(descr)
};

// Parses an npy header from the first bytes of a file and checks that the data area
// (file_size - data_start) holds exactly shape * itemsize(descr) bytes. Versions 1.0 and
// 2.0; descr must be one that ptc::dtype_npy_descr produces or a plain numeric one of known size.
// Errors (kCorrupt) name `file`.
Result<NpyHeader> parse_npy(std::string_view prefix, uint64_t file_size, const std::string& file);
// The header alone, from a prefix holding at least all of it (the data may not be there
// yet: a file being written); data_bytes says how much data must follow.
Result<NpyHeader> parse_npy_header(std::string_view prefix, const std::string& file);

}  // namespace ptcfs::formats
