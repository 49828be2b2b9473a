#include "daemon/dataset/json_check.h"

#include <emmintrin.h>

#include <cstring>

#include <nlohmann/json.hpp>

namespace ptcfs {
namespace {

constexpr int kMaxDepth = 64;
constexpr ptrdiff_t kMaxNumber = 300;  // characters: without an exponent, always finite

bool hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool digit(char c) { return c >= '0' && c <= '9'; }

// The grammar of RFC 8259, walked once; false on an error and on the cases left to nlohmann.
class FastChecker {
 public:
  explicit FastChecker(std::string_view t) : p_(t.data()), end_(t.data() + t.size()) {}

  bool run() {
    skip_ws();
    if (!value()) return false;
    skip_ws();
    return p_ == end_;
  }

 private:
  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }

  bool literal(std::string_view word) {
    if (end_ - p_ < static_cast<ptrdiff_t>(word.size()) || std::memcmp(p_, word.data(), word.size()) != 0) return false;
    p_ += word.size();
    return true;
  }

  bool value() {
    if (p_ == end_) return false;
    switch (*p_) {
      case '{':
        return container('}');
      case '[':
        return container(']');
      case '"':
        return string();
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return number();
    }
  }

  // An object (close '}') or an array (close ']'), at its opening bracket.
  bool container(char close) {
    if (++depth_ > kMaxDepth) return false;
    ++p_;
    skip_ws();
    if (p_ < end_ && *p_ == close) {
      ++p_;
      --depth_;
      return true;
    }
    for (;;) {
      if (close == '}') {
        if (p_ == end_ || *p_ != '"' || !string()) return false;
        skip_ws();
        if (p_ == end_ || *p_ != ':') return false;
        ++p_;
        skip_ws();
      }
      if (!value()) return false;
      skip_ws();
      if (p_ == end_) return false;
      if (*p_ == ',') {
        ++p_;
        skip_ws();
        continue;
      }
      if (*p_ != close) return false;
      ++p_;
      --depth_;
      return true;
    }
  }

  // At the opening quote. Bytes below 0x20 are errors; bytes from 0x80 must form UTF-8.
  bool string() {
    ++p_;
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    for (;;) {
      // As signed bytes, control bytes (0x00-0x1f) and non-ASCII ones (0x80-0xff) are < 0x20.
      while (end_ - p_ >= 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p_));
        const __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                             _mm_cmplt_epi8(v, space));
        const int mask = _mm_movemask_epi8(special);
        if (mask != 0) {
          p_ += __builtin_ctz(static_cast<unsigned>(mask));
          break;
        }
        p_ += 16;
      }
      if (p_ == end_) return false;
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c == '\\') {
        if (!escape()) return false;
      } else if (c >= 0x80) {
        if (!utf8()) return false;
      } else if (c < 0x20) {
        return false;
      } else {
        ++p_;
      }
    }
  }

  // At the backslash. \u escapes of surrogates (pairs) are left to nlohmann.
  bool escape() {
    if (end_ - p_ < 2) return false;
    switch (p_[1]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        p_ += 2;
        return true;
      case 'u': {
        if (end_ - p_ < 6 || !hex(p_[2]) || !hex(p_[3]) || !hex(p_[4]) || !hex(p_[5])) return false;
        if ((p_[2] == 'd' || p_[2] == 'D') && p_[3] >= '8') return false;  // D800-DFFF ('8' < '9' < letters)
        p_ += 6;
        return true;
      }
      default:
        return false;
    }
  }

  // One UTF-8 sequence of two to four bytes (RFC 3629: no overlong forms, no surrogates,
  // nothing past U+10FFFF), at its first byte.
  bool utf8() {
    const auto* s = reinterpret_cast<const unsigned char*>(p_);
    const ptrdiff_t left = end_ - p_;
    auto in = [&](ptrdiff_t i, unsigned char lo, unsigned char hi) { return i < left && s[i] >= lo && s[i] <= hi; };
    const unsigned char c = s[0];
    ptrdiff_t n = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      n = in(1, 0x80, 0xbf) ? 2 : 0;
    } else if (c == 0xe0) {
      n = in(1, 0xa0, 0xbf) && in(2, 0x80, 0xbf) ? 3 : 0;
    } else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) {
      n = in(1, 0x80, 0xbf) && in(2, 0x80, 0xbf) ? 3 : 0;
    } else if (c == 0xed) {
      n = in(1, 0x80, 0x9f) && in(2, 0x80, 0xbf) ? 3 : 0;
    } else if (c == 0xf0) {
      n = in(1, 0x90, 0xbf) && in(2, 0x80, 0xbf) && in(3, 0x80, 0xbf) ? 4 : 0;
    } else if (c >= 0xf1 && c <= 0xf3) {
      n = in(1, 0x80, 0xbf) && in(2, 0x80, 0xbf) && in(3, 0x80, 0xbf) ? 4 : 0;
    } else if (c == 0xf4) {
      n = in(1, 0x80, 0x8f) && in(2, 0x80, 0xbf) && in(3, 0x80, 0xbf) ? 4 : 0;
    }
    p_ += n;
    return n != 0;
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)? ; an exponent is left to nlohmann (it may overflow).
  bool number() {
    const char* start = p_;
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ == end_ || !digit(*p_)) return false;
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && digit(*p_)) ++p_;
    }
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (p_ == end_ || !digit(*p_)) return false;
      while (p_ < end_ && digit(*p_)) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) return false;
    return p_ - start < kMaxNumber;
  }

  const char* p_;
  const char* end_;
  int depth_ = 0;
};

}  // namespace

bool json_valid_fast(std::string_view text) { return FastChecker(text).run(); }

bool json_valid(std::string_view text) {
  return json_valid_fast(text) || nlohmann::json::accept(text.begin(), text.end());
}

}  // namespace ptcfs
