// Element types, named as safetensors names them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "ptc/base/status.h"

namespace ptcfs::ptc {

// New types go last: the order is the table's in dtype.cc.
enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, U16, U32, U64 };

// Bytes per element.
size_t dtype_size(DType d);
// "BF16" etc.
const char* dtype_name(DType d);
// Parses a safetensors dtype name; an unknown name is kInvalidArgument naming it.
Result<DType> parse_dtype(std::string_view name);
// The numpy descr for .npy views. Types numpy lacks are exposed as their raw bits:
// BF16 -> "<u2", F8_* -> "|u1" (documented in docs/FORMATS.md).
const char* dtype_npy_descr(DType d);

}  // namespace ptcfs::ptc
