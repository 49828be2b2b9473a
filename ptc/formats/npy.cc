#include "ptc/formats/npy.h"

#include <algorithm>
#include <cstring>

namespace ptcfs::formats {
namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes
constexpr size_t kMagicLen = 6;
// numpy 1.24 (format.py): data starts at a multiple of ARRAY_ALIGN, and the header keeps
// room for the first axis to grow to GROWTH_AXIS_MAX_DIGITS digits in place.
constexpr size_t kArrayAlign = 64;
constexpr size_t kGrowthAxisMaxDigits = 21;

// Python's repr of a tuple of ints: "()", "(5,)", "(3, 4)".
std::string shape_repr(const ptc::Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// Bytes per element of a descr this reader accepts, or an error: numeric little-endian
// types (and single-byte ones with any byte-order mark) only.
Result<uint64_t> descr_itemsize(const std::string& descr, const std::string& file) {
  struct Known {
    const char* kind_size;
    uint64_t size;
  };
  static constexpr Known kKnown[] = {
      {"b1", 1}, {"i1", 1}, {"u1", 1}, {"i2", 2}, {"u2", 2}, {"f2", 2}, {"i4", 4},
      {"u4", 4}, {"f4", 4}, {"i8", 8}, {"u8", 8}, {"f8", 8}, {"c8", 8}, {"c16", 16},
  };
  if (descr.size() >= 2 && std::strchr("<>|=", descr[0]) != nullptr) {
    const std::string_view rest = std::string_view(descr).substr(1);
    for (const auto& k : kKnown) {
      if (rest != k.kind_size) continue;
      if (k.size == 1 || descr[0] == '<') return k.size;
      if (descr[0] == '>') return invalid(file + ": big-endian dtype '" + descr + "' not supported");
      break;  // '|' or '=' on a multi-byte type: byte order not stated
    }
  }
  return invalid(file + ": dtype '" + descr +
                 "' not supported (expected a little-endian bool, integer, float or complex descr such as '<f4')");
}

// A strict reader for the dict literal numpy writes. It accepts what Python's literal_eval
// would accept of the same shape (either quote, any whitespace, optional trailing commas,
// keys in any order) and nothing else.
class DictReader {
 public:
  DictReader(std::string_view text, const std::string& file) : s_(text), file_(file) {}

  Status read(NpyHeader& out) {
    bool has_descr = false, has_order = false, has_shape = false;
    skip_ws();
    if (!eat('{')) return bad("header does not start with '{'");
    while (true) {
      skip_ws();
      if (eat('}')) break;
      std::string key;
      PTC_RETURN_IF_ERROR(read_string(key));
      skip_ws();
      if (!eat(':')) return bad("expected ':' after '" + key + "'");
      skip_ws();
      if (key == "descr") {
        if (has_descr) return bad("duplicate key 'descr'");
        has_descr = true;
        if (peek() == '[') return invalid(file_ + ": structured dtypes are not supported");
        PTC_RETURN_IF_ERROR(read_string(out.descr));
      } else if (key == "fortran_order") {
        if (has_order) return bad("duplicate key 'fortran_order'");
        has_order = true;
        PTC_RETURN_IF_ERROR(read_bool(out.fortran_order));
      } else if (key == "shape") {
        if (has_shape) return bad("duplicate key 'shape'");
        has_shape = true;
        PTC_RETURN_IF_ERROR(read_tuple(out.shape));
      } else {
        return bad("unknown key '" + key + "' (expected descr, fortran_order, shape)");
      }
      skip_ws();
      if (eat(',')) continue;
      if (eat('}')) break;
      return bad("expected ',' or '}' after the value of '" + key + "'");
    }
    skip_ws();
    if (pos_ != s_.size()) return bad("unexpected text after '}'");
    if (!has_descr) return bad("missing key 'descr'");
    if (!has_order) return bad("missing key 'fortran_order'");
    if (!has_shape) return bad("missing key 'shape'");
    return Status::ok();
  }

 private:
  Status bad(const std::string& what) const {
    return corrupt(file_ + ": npy header at byte " + std::to_string(pos_) + ": " + what);
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool eat(char c) {
    if (peek() != c) return false;  // peek() is '\0' at the end, never a c we look for
    ++pos_;
    return true;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  // A quoted string without escapes (no descr or key needs one).
  Status read_string(std::string& out) {
    const char q = peek();
    if (q != '\'' && q != '"') return bad("expected a quoted string");
    const size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) return bad("unterminated string");
    out.assign(s_.substr(pos_ + 1, end - pos_ - 1));
    for (char c : out)
      if (c == '\\' || c == '\n' || static_cast<unsigned char>(c) >= 0x80 || static_cast<unsigned char>(c) < 0x20)
        return bad("unsupported character in string");
    pos_ = end + 1;
    return Status::ok();
  }
  Status read_bool(bool& out) {
    if (s_.substr(pos_, 4) == "True") {
      out = true;
      pos_ += 4;
    } else if (s_.substr(pos_, 5) == "False") {
      out = false;
      pos_ += 5;
    } else {
      return bad("fortran_order is not True or False");
    }
    return Status::ok();
  }
  // A non-negative Python int literal fitting in int64 (no sign, no leading zeros).
  Status read_int(int64_t& out) {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s_[pos_] - '0', &v))
        return bad("dimension too large");
      ++pos_;
    }
    if (pos_ == start) return bad("shape holds something other than non-negative integers");
    if (s_[start] == '0' && pos_ - start > 1) return bad("dimension with a leading zero");
    out = v;
    return Status::ok();
  }
  // "()", "(5,)", "(3, 4)", "(3, 4,)".
  Status read_tuple(ptc::Shape& out) {
    if (!eat('(')) return bad("shape is not a tuple");
    skip_ws();
    if (eat(')')) return Status::ok();
    while (true) {
      int64_t d = 0;
      PTC_RETURN_IF_ERROR(read_int(d));
      out.push_back(d);
      skip_ws();
      if (eat(',')) {
        skip_ws();
        if (eat(')')) return Status::ok();
        continue;
      }
      if (eat(')')) {
        if (out.size() == 1) return bad("shape '(n)' is an int, not a tuple");
        return Status::ok();
      }
      return bad("expected ',' or ')' in shape");
    }
  }

  std::string_view s_;
  const std::string& file_;
  size_t pos_ = 0;
};

}  // namespace

std::string npy_header(ptc::DType dtype, const ptc::Shape& shape) {
  std::string dict = std::string("{'descr': '") + ptc::dtype_npy_descr(dtype) +
                     "', 'fortran_order': False, 'shape': " + shape_repr(shape) + ", }";
  if (!shape.empty()) {
    const size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  const size_t hlen = dict.size() + 1;  // with the final '\n'
  // Version 1.0 stores the length in a u16, 2.0 in a u32; numpy picks the first that fits.
  // As numpy does, an already aligned header still gets a full ARRAY_ALIGN of padding.
  int version = 1;
  size_t len_bytes = 2;
  size_t pad = kArrayAlign - (kMagicLen + 2 + len_bytes + hlen) % kArrayAlign;
  if (hlen + pad > 0xffff) {
    version = 2;
    len_bytes = 4;
    pad = kArrayAlign - (kMagicLen + 2 + len_bytes + hlen) % kArrayAlign;
  }
  const uint64_t total = hlen + pad;
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(version));
  out.push_back('\0');
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<char>((total >> (8 * i)) & 0xff));
  out += dict;
  out.append(pad, ' ');
  out.push_back('\n');
  return out;
}

namespace {
Result<NpyHeader> parse_header(std::string_view prefix, uint64_t file_size, const std::string& file);
}  // namespace

Result<NpyHeader> parse_npy(std::string_view prefix, uint64_t file_size, const std::string& file) {
  PTC_ASSIGN_OR_RETURN(NpyHeader h, parse_header(prefix, file_size, file));
  const uint64_t data = file_size - h.data_start;
  if (data != h.data_bytes)
    return corrupt(file + ": data area holds " + std::to_string(data) + " bytes but " + h.descr + " " +
                   ptc::shape_string(h.shape) + " needs " + std::to_string(h.data_bytes));
  return h;
}

Result<NpyHeader> parse_npy_header(std::string_view prefix, const std::string& file) {
  return parse_header(prefix, UINT64_MAX, file);
}

namespace {
// The header, checked against the bytes given and the file's size (UINT64_MAX: unknown).
Result<NpyHeader> parse_header(std::string_view prefix, uint64_t file_size, const std::string& file) {
  const uint64_t have = std::min<uint64_t>(prefix.size(), file_size);
  const std::string_view magic(kMagic, kMagicLen);
  const size_t m = std::min<uint64_t>(have, kMagicLen);
  if (prefix.substr(0, m) != magic.substr(0, m)) return corrupt(file + ": not an npy file (bad magic)");
  if (have < kMagicLen + 2)
    return corrupt(file + ": truncated: " + std::to_string(have) + " bytes, shorter than the npy preamble");
  const int major = static_cast<unsigned char>(prefix[6]), minor = static_cast<unsigned char>(prefix[7]);
  if (major == 3 && minor == 0) return invalid(file + ": npy version 3.0 (UTF-8 header) not supported");
  if ((major != 1 && major != 2) || minor != 0)
    return corrupt(file + ": unknown npy version " + std::to_string(major) + "." + std::to_string(minor));
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t preamble = kMagicLen + 2 + len_bytes;
  if (have < preamble)
    return corrupt(file + ": truncated: " + std::to_string(have) + " bytes, shorter than the npy preamble");
  uint64_t hlen = 0;
  for (size_t i = len_bytes; i-- > 0;) hlen = (hlen << 8) | static_cast<unsigned char>(prefix[kMagicLen + 2 + i]);

  NpyHeader h;
  h.data_start = preamble + hlen;
  if (h.data_start > file_size)
    return corrupt(file + ": truncated: npy header needs " + std::to_string(h.data_start) + " bytes but the file has " +
                   std::to_string(file_size));
  if (h.data_start > prefix.size())
    return corrupt(file + ": truncated: npy header needs " + std::to_string(h.data_start) + " bytes, only " +
                   std::to_string(prefix.size()) + " given");

  PTC_RETURN_IF_ERROR(DictReader(prefix.substr(preamble, hlen), file).read(h));
  if (h.fortran_order) return invalid(file + ": Fortran order not supported");
  PTC_ASSIGN_OR_RETURN(const uint64_t itemsize, descr_itemsize(h.descr, file));

  int64_t n = static_cast<int64_t>(itemsize);
  for (int64_t d : h.shape)
    if (__builtin_mul_overflow(n, d, &n))
      return corrupt(file + ": shape " + ptc::shape_string(h.shape) + " is too large");
  h.data_bytes = static_cast<uint64_t>(n);
  return h;
}
}  // namespace

}  // namespace ptcfs::formats
