#include "ptc/formats/mmidx.h"

#include <cstring>

#include "ptc/base/endian.h"

namespace ptcfs::formats {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

template <class T>
void append_le(std::string& out, T v) {
  char b[sizeof v];
  store_le(b, v);
  out.append(b, sizeof v);
}

}  // namespace

int mmidx_itemsize(int code) {
  switch (code) {
    case 1:
    case 2:
      return 1;
    case 3:
    case 8:
      return 2;
    case 4:
    case 7:
      return 4;
    case 5:
    case 6:
      return 8;
    default:
      return 0;
  }
}

const char* mmidx_dtype_name(int code) {
  static const char* names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
  return code >= 1 && code <= 8 ? names[code] : "?";
}

uint64_t mmidx_size(uint64_t sequences) { return kMmidxHeaderBytes + sequences * 20 + 8; }

Result<MmidxIndex> parse_mmidx(std::string_view idx, uint64_t bin_size, const std::string& file) {
  auto bad = [&](const std::string& what) { return corrupt(file + ": " + what); };
  if (idx.size() < kMmidxHeaderBytes) return bad("shorter than the 34-byte MMIDIDX header");
  if (std::memcmp(idx.data(), kMagic, sizeof kMagic) != 0) return bad("not an MMIDIDX index (bad magic)");
  const auto version = load_le<uint64_t>(idx.data() + 9);
  if (version != 1) return bad("MMIDIDX version " + std::to_string(version) + ", only 1 is supported");
  MmidxIndex out;
  out.dtype_code = static_cast<unsigned char>(idx[17]);
  const int item = mmidx_itemsize(out.dtype_code);
  if (item == 0) return bad("unknown dtype code " + std::to_string(out.dtype_code));
  const auto n = load_le<uint64_t>(idx.data() + 18);
  const auto m = load_le<uint64_t>(idx.data() + 26);
  const uint64_t body = idx.size() - kMmidxHeaderBytes;
  if (n > body / 12 || m > body / 8 || kMmidxHeaderBytes + n * 12 + m * 8 != idx.size())
    return bad("size " + std::to_string(idx.size()) + " bytes does not match its " + std::to_string(n) +
               " sequences and " + std::to_string(m) +
               " document indices (truncated, or trailing bytes such as "
               "multimodal sequence modes, which are not supported)");
  const char* lengths = idx.data() + kMmidxHeaderBytes;
  const char* pointers = lengths + n * 4;
  const char* docs = pointers + n * 8;
  out.offsets.resize(n);
  out.bytes.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    const auto len = load_le<int32_t>(lengths + i * 4);
    const auto ptr = load_le<int64_t>(pointers + i * 8);
    if (len < 0) return bad("sequence " + std::to_string(i) + " has a negative length " + std::to_string(len));
    if (ptr < 0) return bad("sequence " + std::to_string(i) + " has a negative pointer " + std::to_string(ptr));
    const uint64_t bytes = static_cast<uint64_t>(len) * static_cast<uint64_t>(item);
    const auto off = static_cast<uint64_t>(ptr);
    if (off > bin_size || bytes > bin_size - off)
      return bad("sequence " + std::to_string(i) + " (bytes [" + std::to_string(off) + ", " +
                 std::to_string(off + bytes) + ")) lies past the end of the .bin file (" + std::to_string(bin_size) +
                 " bytes)");
    out.offsets[i] = off;
    out.bytes[i] = bytes;
  }
  if (m == 0) return bad("no document indices (there must be at least the leading 0)");
  int64_t prev = -1;
  for (uint64_t i = 0; i < m; ++i) {
    const auto d = load_le<int64_t>(docs + i * 8);
    if ((i == 0 && d != 0) || d < prev || d > static_cast<int64_t>(n))
      return bad("document index " + std::to_string(i) + " is " + std::to_string(d) +
                 " (they must rise from 0 to the sequence count " + std::to_string(n) + ")");
    prev = d;
  }
  if (prev != static_cast<int64_t>(n))
    return bad("the last document index is " + std::to_string(prev) + ", not the sequence count " + std::to_string(n));
  out.documents = m - 1;
  return out;
}

std::string render_mmidx(int dtype_code, const std::vector<uint64_t>& bytes) {
  const uint64_t n = bytes.size();
  const auto item = static_cast<uint64_t>(mmidx_itemsize(dtype_code));
  std::string out;
  out.reserve(mmidx_size(n));
  out.append(kMagic, sizeof kMagic);
  append_le<uint64_t>(out, 1);
  out.push_back(static_cast<char>(dtype_code));
  append_le<uint64_t>(out, n);
  append_le<uint64_t>(out, n + 1);
  for (uint64_t b : bytes) append_le<int32_t>(out, static_cast<int32_t>(b / item));
  uint64_t ptr = 0;
  for (uint64_t b : bytes) {
    append_le<int64_t>(out, static_cast<int64_t>(ptr));
    ptr += b;
  }
  for (uint64_t i = 0; i <= n; ++i) append_le<int64_t>(out, static_cast<int64_t>(i));
  return out;
}

}  // namespace ptcfs::formats
