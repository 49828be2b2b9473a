#include "ptc/formats/torch_archive.h"

#include <array>
#include <string_view>
#include <vector>

#include "ptc/base/endian.h"
#include "ptc/formats/pickle_writer.h"

namespace ptcfs::formats {
namespace {

constexpr uint32_t kMax32 = 0xFFFFFFFFu;

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  store_le<T>(b, v);
  out.append(b, sizeof(T));
}

struct Record {
  std::string name;
  uint32_t crc = 0;
  uint64_t size = 0;
  uint64_t offset = 0;  // of its local header, from the archive's start
};

bool big(uint64_t v) { return v >= kMax32; }

// A local header for `r` at out.size() (r.offset is set); with `align`, padding in an "FB"
// extra field puts the data at a multiple of it.
void local_header(std::string& out, Record& r, size_t align) {
  r.offset = out.size();
  const bool z64 = big(r.size);
  std::string extra;
  if (z64) {
    put<uint16_t>(extra, 0x0001);
    put<uint16_t>(extra, 16);
    put<uint64_t>(extra, r.size);
    put<uint64_t>(extra, r.size);
  }
  if (align) {
    const size_t before = out.size() + 30 + r.name.size() + extra.size() + 4;
    const size_t pad = (align - before % align) % align;
    put<uint16_t>(extra, 0x4246);  // "FB", as torch pads
    put<uint16_t>(extra, static_cast<uint16_t>(pad));
    extra.append(pad, 'Z');
  }
  put<uint32_t>(out, 0x04034b50);
  put<uint16_t>(out, z64 ? 45 : 20);  // version needed
  put<uint16_t>(out, 0);              // flags
  put<uint16_t>(out, 0);              // stored
  put<uint16_t>(out, 0);              // time
  put<uint16_t>(out, 0x21);           // date: 1980-01-01
  put<uint32_t>(out, r.crc);
  put<uint32_t>(out, z64 ? kMax32 : static_cast<uint32_t>(r.size));
  put<uint32_t>(out, z64 ? kMax32 : static_cast<uint32_t>(r.size));
  put<uint16_t>(out, static_cast<uint16_t>(r.name.size()));
  put<uint16_t>(out, static_cast<uint16_t>(extra.size()));
  out += r.name;
  out += extra;
}

void central_entry(std::string& out, const Record& r) {
  const bool zs = big(r.size), zo = big(r.offset);
  std::string extra;
  if (zs || zo) {
    put<uint16_t>(extra, 0x0001);
    put<uint16_t>(extra, static_cast<uint16_t>((zs ? 16 : 0) + (zo ? 8 : 0)));
    if (zs) {
      put<uint64_t>(extra, r.size);
      put<uint64_t>(extra, r.size);
    }
    if (zo) put<uint64_t>(extra, r.offset);
  }
  put<uint32_t>(out, 0x02014b50);
  put<uint16_t>(out, 45);  // made by
  put<uint16_t>(out, (zs || zo) ? 45 : 20);
  put<uint16_t>(out, 0);
  put<uint16_t>(out, 0);
  put<uint16_t>(out, 0);
  put<uint16_t>(out, 0x21);
  put<uint32_t>(out, r.crc);
  put<uint32_t>(out, zs ? kMax32 : static_cast<uint32_t>(r.size));
  put<uint32_t>(out, zs ? kMax32 : static_cast<uint32_t>(r.size));
  put<uint16_t>(out, static_cast<uint16_t>(r.name.size()));
  put<uint16_t>(out, static_cast<uint16_t>(extra.size()));
  put<uint16_t>(out, 0);  // comment
  put<uint16_t>(out, 0);  // disk
  put<uint16_t>(out, 0);  // internal attributes
  put<uint32_t>(out, 0);  // external attributes
  put<uint32_t>(out, zo ? kMax32 : static_cast<uint32_t>(r.offset));
  out += r.name;
  out += extra;
}

std::string data_pkl(ptc::DType dtype, const ptc::Shape& shape) {
  PickleWriter w;
  w.global("torch._utils", "_rebuild_tensor_v3");
  w.mark();
  w.mark();  // the persistent id of the storage: ('storage', UntypedStorage, key, location, bytes)
  w.str("storage");
  w.global("torch.storage", "UntypedStorage");
  w.str("0");
  w.str("cpu");
  w.integer(ptc::num_elements(shape) * static_cast<int64_t>(ptc::dtype_size(dtype)));
  w.tuple();
  w.persid();
  w.integer(0);  // storage offset
  w.int_tuple(shape);
  std::vector<int64_t> stride(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  w.int_tuple(stride);
  w.boolean(false);  // requires_grad
  w.global("collections", "OrderedDict");
  w.empty_tuple();
  w.reduce();
  w.global("torch", torch_dtype_name(dtype));
  w.tuple();
  w.reduce();
  return w.finish();
}

}  // namespace

const char* torch_dtype_name(ptc::DType d) {
  switch (d) {
    case ptc::DType::F64:
      return "float64";
    case ptc::DType::F32:
      return "float32";
    case ptc::DType::F16:
      return "float16";
    case ptc::DType::BF16:
      return "bfloat16";
    case ptc::DType::I64:
      return "int64";
    case ptc::DType::I32:
      return "int32";
    case ptc::DType::I16:
      return "int16";
    case ptc::DType::I8:
      return "int8";
    case ptc::DType::U8:
      return "uint8";
    case ptc::DType::BOOL:
      return "bool";
    case ptc::DType::F8_E4M3:
      return "float8_e4m3fn";
    case ptc::DType::F8_E5M2:
      return "float8_e5m2";
    case ptc::DType::U16:
      return "uint16";
    case ptc::DType::U32:
      return "uint32";
    case ptc::DType::U64:
      return "uint64";
  }
  return "uint8";
}

uint32_t crc32(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

TorchArchive torch_tensor_archive(ptc::DType dtype, const ptc::Shape& shape) {
  TorchArchive a;
  a.data_bytes = static_cast<uint64_t>(ptc::num_elements(shape)) * ptc::dtype_size(dtype);
  const std::string pkl = data_pkl(dtype, shape);
  const std::string_view small[][2] = {
      {"archive/data.pkl", pkl}, {"archive/byteorder", "little"}, {"archive/version", "3\n"}};
  std::vector<Record> records;
  for (const auto& [name, body] : small) {
    Record r{std::string(name), crc32(body.data(), body.size()), body.size(), 0};
    local_header(a.head, r, 0);
    a.head += body;
    records.push_back(r);
  }
  Record data{"archive/data/0", 0, a.data_bytes, 0};
  local_header(a.head, data, 64);
  records.push_back(data);

  const uint64_t cd_offset = a.head.size() + a.data_bytes;
  for (const Record& r : records) central_entry(a.tail, r);
  const uint64_t cd_size = a.tail.size();
  const uint64_t eocd64 = cd_offset + cd_size;
  put<uint32_t>(a.tail, 0x06064b50);  // ZIP64 end of central directory
  put<uint64_t>(a.tail, 44);
  put<uint16_t>(a.tail, 45);
  put<uint16_t>(a.tail, 45);
  put<uint32_t>(a.tail, 0);
  put<uint32_t>(a.tail, 0);
  put<uint64_t>(a.tail, records.size());
  put<uint64_t>(a.tail, records.size());
  put<uint64_t>(a.tail, cd_size);
  put<uint64_t>(a.tail, cd_offset);
  put<uint32_t>(a.tail, 0x07064b50);  // its locator
  put<uint32_t>(a.tail, 0);
  put<uint64_t>(a.tail, eocd64);
  put<uint32_t>(a.tail, 1);
  put<uint32_t>(a.tail, 0x06054b50);  // end of central directory
  put<uint16_t>(a.tail, 0);
  put<uint16_t>(a.tail, 0);
  put<uint16_t>(a.tail, static_cast<uint16_t>(records.size()));
  put<uint16_t>(a.tail, static_cast<uint16_t>(records.size()));
  put<uint32_t>(a.tail, big(cd_size) ? kMax32 : static_cast<uint32_t>(cd_size));
  put<uint32_t>(a.tail, big(cd_offset) ? kMax32 : static_cast<uint32_t>(cd_offset));
  put<uint16_t>(a.tail, 0);
  return a;
}

}  // namespace ptcfs::formats
