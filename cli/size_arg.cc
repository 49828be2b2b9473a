#include "cli/size_arg.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>

namespace ptcfs::cli {

namespace {

using u128 = unsigned __int128;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The unit's bytes, by lower-case name.
std::optional<uint64_t> unit_bytes(const std::string& unit) {
  static const std::pair<const char*, uint64_t> units[] = {{"", 1},
                                                           {"b", 1},
                                                           {"kb", 1000},
                                                           {"mb", 1000000},
                                                           {"gb", 1000000000},
                                                           {"tb", 1000000000000},
                                                           {"kib", 1ull << 10},
                                                           {"mib", 1ull << 20},
                                                           {"gib", 1ull << 30},
                                                           {"tib", 1ull << 40}};
  for (const auto& [name, bytes] : units)
    if (unit == name) return bytes;
  return std::nullopt;
}

}  // namespace

Result<uint64_t> parse_size(const std::string& text) {
  const auto bad = [&] {
    return invalid("'" + text +
                   "' is not a size (e.g. 5GB, 500MB, 100kB, 2GiB or a number of bytes; units ignore case)");
  };
  // The number, exactly, as value / scale (at most 18 digits, so no overflow).
  u128 value = 0, scale = 1;
  size_t i = 0, digits = 0;
  bool point = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !point && digits > 0) {
      point = true;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      value = value * 10 + static_cast<unsigned>(c - '0');
      if (point) scale *= 10;
      ++digits;
    } else {
      break;
    }
  }
  if (digits == 0 || digits > 18 || text[i - 1] == '.') return bad();
  std::string unit = lower(text.substr(i));
  if (!unit.empty() && unit[0] == ' ') unit.erase(0, 1);  // "100.0 kB", as ptcfs prints sizes
  const auto per_unit = unit_bytes(unit);
  if (!per_unit || (unit.empty() && i < text.size())) return bad();
  const u128 bytes = value * *per_unit;
  if (bytes % scale != 0) return invalid("'" + text + "' is not a whole number of bytes");
  if (bytes / scale > (u128{1} << 63)) return invalid("'" + text + "' is more than 2^63 bytes");
  const auto n = static_cast<uint64_t>(bytes / scale);
  if (n == 0) return invalid("the size must be more than 0, got '" + text + "'");
  return n;
}

}  // namespace ptcfs::cli
