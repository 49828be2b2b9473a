#include "ptc/formats/safetensors.h"

#include <algorithm>
#include <functional>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "ptc/base/endian.h"
#include "ptc/base/json_util.h"

namespace ptcfs::formats {
namespace {

using json = nlohmann::json;

std::string range_string(uint64_t b, uint64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + ")"; }

// Bytes of `shape` elements of `dtype`; false on overflow of int64 (no file holds more).
bool byte_size(ptc::DType dtype, const ptc::Shape& shape, uint64_t& out) {
  int64_t n = static_cast<int64_t>(ptc::dtype_size(dtype));
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  out = static_cast<uint64_t>(n);
  return true;
}

// A JSON number that is a non-negative integer fitting in int64.
bool as_index(const json& v, uint64_t& out) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) return false;
  out = v.get<uint64_t>();
  return out <= static_cast<uint64_t>(INT64_MAX);
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const json& v, uint64_t data_size,
                                     const std::string& where) {
  if (!v.is_object()) return corrupt(where + "entry is a JSON " + v.type_name() + ", not an object");
  for (const auto& [key, _] : v.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      return corrupt(where + "unknown member '" + key + "' (expected dtype, shape, data_offsets)");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) return corrupt(where + "missing member '" + key + "'");

  SafetensorsEntry e;
  e.name = name;
  const json& dt = v["dtype"];
  if (!dt.is_string()) return corrupt(where + "dtype is a JSON " + dt.type_name() + ", not a string");
  auto parsed = ptc::parse_dtype(dt.get<std::string>());
  if (!parsed) return corrupt(where + parsed.status().message());
  e.dtype = *parsed;

  const json& shape = v["shape"];
  if (!shape.is_array()) return corrupt(where + "shape is not a list");
  for (const json& d : shape) {
    uint64_t x;
    if (!as_index(d, x)) return corrupt(where + "shape " + shape.dump() + " is not a list of non-negative integers");
    e.shape.push_back(static_cast<int64_t>(x));
  }

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !as_index(off[0], e.begin) || !as_index(off[1], e.end))
    return corrupt(where + "data_offsets " + off.dump() + " is not a pair of non-negative integers");
  if (e.begin > e.end)
    return corrupt(where + "data_offsets " + range_string(e.begin, e.end) + " end before they begin");

  uint64_t need;
  if (!byte_size(e.dtype, e.shape, need))
    return corrupt(where + std::string(ptc::dtype_name(e.dtype)) + " " + ptc::shape_string(e.shape) + " is too large");
  if (e.end - e.begin != need)
    return corrupt(where + "data_offsets " + range_string(e.begin, e.end) + " hold " + std::to_string(e.end - e.begin) +
                   " bytes but " + ptc::dtype_name(e.dtype) + " " + ptc::shape_string(e.shape) + " needs " +
                   std::to_string(need));
  if (e.end > data_size)
    return corrupt(where + "data_offsets " + range_string(e.begin, e.end) + " run past the data area of " +
                   std::to_string(data_size) + " bytes");
  return e;
}

Status parse_metadata(const json& v, const std::string& file, std::map<std::string, std::string>& out) {
  if (!v.is_object()) return corrupt(file + ": __metadata__ is a JSON " + v.type_name() + ", not an object");
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string())
      return corrupt(file + ": __metadata__ '" + key + "' is a JSON " + value.type_name() + ", not a string");
    out[key] = value.get<std::string>();
  }
  return Status::ok();
}

// Whether s is valid UTF-8. dump() throws on anything else, so names and metadata are
// checked with it here, once, and the header's own dump() cannot throw.
bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

Result<SafetensorsHeader> read_safetensors_header(uint64_t file_size, const ReadAtFn& read, const std::string& file) {
  std::string first8(static_cast<size_t>(std::min<uint64_t>(file_size, 8)), '\0');
  PTC_ASSIGN_OR_RETURN(size_t got, read(0, first8.data(), first8.size()));
  first8.resize(got);
  PTC_ASSIGN_OR_RETURN(uint64_t n, safetensors_header_len(first8, file_size, file));
  std::string prefix(8 + n, '\0');
  PTC_ASSIGN_OR_RETURN(got, read(0, prefix.data(), prefix.size()));
  prefix.resize(got);
  return parse_safetensors(prefix, file_size, file);
}

Result<uint64_t> safetensors_header_len(std::string_view first8, uint64_t file_size, const std::string& file) {
  if (file_size < 8 || first8.size() < 8)
    return corrupt(file + ": truncated: " + std::to_string(std::min<uint64_t>(file_size, first8.size())) +
                   " bytes, a safetensors file starts with an 8-byte header length");
  const uint64_t n = load_le<uint64_t>(first8.data());
  if (n > kMaxSafetensorsHeader)
    return corrupt(file + ": header length " + std::to_string(n) + " exceeds the limit of " +
                   std::to_string(kMaxSafetensorsHeader) + " bytes");
  if (n > file_size - 8)
    return corrupt(file + ": truncated: header length " + std::to_string(n) + " needs " + std::to_string(8 + n) +
                   " bytes but the file has " + std::to_string(file_size));
  return n;
}

Result<SafetensorsHeader> parse_safetensors(std::string_view prefix, uint64_t file_size, const std::string& file) {
  SafetensorsHeader h;
  PTC_ASSIGN_OR_RETURN(h.header_len, safetensors_header_len(prefix.substr(0, 8), file_size, file));
  h.data_start = 8 + h.header_len;
  if (prefix.size() < h.data_start)
    return corrupt(file + ": truncated: header needs " + std::to_string(h.data_start) + " bytes, only " +
                   std::to_string(prefix.size()) + " given");
  const uint64_t data_size = file_size - h.data_start;

  const std::string_view text = prefix.substr(8, h.header_len);
  // As the safetensors format has it: the header opens with '{' (no byte order mark, no space;
  // a BOM was skipped by the JSON parser, so Python's reader and this one disagreed).
  if (text.empty() || text.front() != '{') return corrupt(file + ": header does not start with '{'");
  PTC_ASSIGN_OR_RETURN(const json root, parse_json(text, file + ": header", Code::kCorrupt));
  if (!root.is_object()) return corrupt(file + ": header is a JSON " + root.type_name() + ", not an object");

  for (const auto& [name, v] : root.items()) {
    if (name == "__metadata__") {
      PTC_RETURN_IF_ERROR(parse_metadata(v, file, h.metadata));
      continue;
    }
    PTC_ASSIGN_OR_RETURN(auto e, parse_entry(name, v, data_size, file + ": tensor '" + name + "': "));
    h.entries.push_back(std::move(e));
  }

  // Ties (zero-size tensors) are ordered by name so that the order is deterministic.
  std::sort(h.entries.begin(), h.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;  // the entries so far cover [0, covered) exactly
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : h.entries) {
    if (e.begin < covered)
      return corrupt(file + ": tensor '" + e.name + "': data_offsets " + range_string(e.begin, e.end) +
                     " overlap tensor '" + prev->name + "' at " + range_string(prev->begin, prev->end));
    if (e.begin > covered)
      return corrupt(file + ": tensor '" + e.name + "': data_offsets " + range_string(e.begin, e.end) +
                     " leave a hole " + range_string(covered, e.begin) + " in the data area");
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size)
    return corrupt(file + ": tensors cover " + range_string(0, covered) + " but the data area holds " +
                   std::to_string(data_size) + " bytes");
  return h;
}

uint64_t SafetensorsLayout::file_size() const { return header.size() + (entries.empty() ? 0 : entries.back().end); }

Result<SafetensorsLayout> layout_safetensors(const std::vector<TensorDecl>& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  SafetensorsLayout out;
  json h = json::object();  // std::map-backed: keys sorted, as Python's sort_keys=True
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") return invalid("tensor name '__metadata__' is reserved by safetensors");
    if (h.contains(t.name)) return invalid("duplicate tensor name '" + t.name + "'");
    if (!valid_utf8(t.name)) return invalid("tensor name '" + t.name + "' is not valid UTF-8");
    uint64_t n;
    if (!byte_size(t.dtype, t.shape, n) || n > static_cast<uint64_t>(INT64_MAX) - offset)
      return invalid("tensor '" + t.name + "': shape " + ptc::shape_string(t.shape) + " is negative or too large");
    SafetensorsEntry e{t.name, t.dtype, t.shape, offset, offset + n};
    h[t.name] = {
        {"data_offsets", json::array({e.begin, e.end})}, {"dtype", ptc::dtype_name(t.dtype)}, {"shape", t.shape}};
    offset = e.end;
    out.entries.push_back(std::move(e));
  }
  if (!metadata.empty()) {
    for (const auto& [k, v] : metadata)
      if (!valid_utf8(k) || !valid_utf8(v)) return invalid("__metadata__ '" + k + "' is not valid UTF-8");
    h["__metadata__"] = metadata;
  }

  std::string text = h.dump();
  if (text.size() > kMaxSafetensorsHeader)
    return invalid("safetensors header of " + std::to_string(text.size()) + " bytes exceeds the limit of " +
                   std::to_string(kMaxSafetensorsHeader));
  text.append((8 - text.size() % 8) % 8, ' ');
  out.header.reserve(8 + text.size());
  for (int i = 0; i < 8; ++i) out.header.push_back(static_cast<char>((text.size() >> (8 * i)) & 0xff));
  out.header += text;
  return out;
}

}  // namespace ptcfs::formats
