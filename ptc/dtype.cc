#include "ptc/dtype.h"

namespace ptcfs::ptc {
namespace {
struct Info {
  DType d;
  const char* name;
  size_t size;
  const char* npy;
};
constexpr Info kInfo[] = {
    {DType::F64, "F64", 8, "<f8"},
    {DType::F32, "F32", 4, "<f4"},
    {DType::F16, "F16", 2, "<f2"},
    {DType::BF16, "BF16", 2, "<u2"},
    {DType::I64, "I64", 8, "<i8"},
    {DType::I32, "I32", 4, "<i4"},
    {DType::I16, "I16", 2, "<i2"},
    {DType::I8, "I8", 1, "|i1"},
    {DType::U8, "U8", 1, "|u1"},
    {DType::BOOL, "BOOL", 1, "|b1"},
    {DType::F8_E4M3, "F8_E4M3", 1, "|u1"},
    {DType::F8_E5M2, "F8_E5M2", 1, "|u1"},
    // safetensors' unsigned types, which torch 2.x holds as torch.uint16/uint32/uint64.
    {DType::U16, "U16", 2, "<u2"},
    {DType::U32, "U32", 4, "<u4"},
    {DType::U64, "U64", 8, "<u8"},
};
const Info& info(DType d) { return kInfo[static_cast<int>(d)]; }
}  // namespace

size_t dtype_size(DType d) { return info(d).size; }
const char* dtype_name(DType d) { return info(d).name; }
const char* dtype_npy_descr(DType d) { return info(d).npy; }

Result<DType> parse_dtype(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.name) return i.d;
  return invalid("unknown dtype '" + std::string(name) +
                 "' (expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2 U16 U32 U64)");
}

}  // namespace ptcfs::ptc
