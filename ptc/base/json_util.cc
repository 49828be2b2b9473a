#include "ptc/base/json_util.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <optional>
#include <set>
#include <vector>

namespace ptcfs {

namespace {

// A SAX pass that records the first key repeated within one object. (nlohmann's parse
// callback would do, but its parser rescans the enclosing object at every object end:
// quadratic in the number of tensors.)
class DuplicateKeyCheck final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::optional<std::string> duplicate;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!open_.back().insert(k).second && !duplicate) duplicate = k;
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  std::vector<std::set<std::string>> open_;  // keys seen in each enclosing object
};

// The deepest nesting of arrays and objects, counted outside strings; stops once past `limit`.
// A linear scan that allocates nothing, so a document of a million '[' costs a pass over its
// bytes instead of a DOM of a million arrays (gigabytes).
size_t nesting_depth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) break;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

nlohmann::json parse_json_lenient(std::string_view text) {
  if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

Result<nlohmann::json> parse_json(std::string_view text, const std::string& where, Code code) {
  if (text.find('\0') != std::string_view::npos) return Status(code, where + ": not valid JSON (contains a NUL byte)");
  if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    return Status(code, where + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  auto j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(code, where + ": not valid JSON");
  DuplicateKeyCheck dup;
  nlohmann::json::sax_parse(text.begin(), text.end(), &dup);
  if (dup.duplicate) return Status(code, where + ": duplicate key '" + *dup.duplicate + "'");
  return j;
}

Status check_members(const nlohmann::json& obj, std::initializer_list<std::string_view> allowed,
                     const std::string& where) {
  if (!obj.is_object()) return invalid(where + ": expected a JSON object");
  for (const auto& [key, _] : obj.items()) {
    bool ok = false;
    for (auto a : allowed) ok = ok || key == a;
    if (!ok) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      return invalid(where + ": unknown key '" + key + "' (allowed: " + list + ")");
    }
  }
  return Status::ok();
}

Result<int64_t> get_int(const nlohmann::json& v, const std::string& where, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return invalid(where + ": expected an integer, got " + v.dump());
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return invalid(where + ": integer out of range");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    return invalid(where + ": " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "]");
  return x;
}

Result<std::string> get_string(const nlohmann::json& v, const std::string& where) {
  if (!v.is_string()) return invalid(where + ": expected a string, got " + v.dump());
  return v.get<std::string>();
}

namespace {
const nlohmann::json* member(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}
Status absent(const char* key, const std::string& where) { return invalid(where + " lacks '" + key + "'"); }
Status wrong(const char* key, const std::string& where, const char* what) {
  return invalid(where + " field '" + key + "' must be " + what);
}
}  // namespace

Result<std::string> member_string(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto* v = member(obj, key);
  if (!v) return absent(key, where);
  if (!v->is_string()) return wrong(key, where, "a string");
  return v->get<std::string>();
}

Result<uint64_t> member_u64(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto* v = member(obj, key);
  if (!v) return absent(key, where);
  if (!v->is_number_unsigned()) return wrong(key, where, "a non-negative integer");
  return v->get<uint64_t>();
}

Result<std::vector<std::string>> member_strings(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto* v = member(obj, key);
  if (!v) return absent(key, where);
  if (!v->is_array()) return wrong(key, where, "a list of strings");
  std::vector<std::string> out;
  for (const auto& e : *v) {
    if (!e.is_string()) return wrong(key, where, "a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

Result<std::vector<int>> member_gpus_or_empty(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto* v = member(obj, key);
  if (!v) return std::vector<int>();
  if (!v->is_array()) return wrong(key, where, "a list of GPU counts");
  std::vector<int> out;
  for (const auto& e : *v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 1 || e.get<int64_t>() > (1 << 20))
      return wrong(key, where, "a list of GPU counts (integers from 1)");
    out.push_back(static_cast<int>(e.get<int64_t>()));
  }
  return out;
}

Result<std::vector<std::vector<std::string>>> member_string_lists(const nlohmann::json& obj, const char* key,
                                                                  const std::string& where) {
  const auto* v = member(obj, key);
  if (!v) return absent(key, where);
  if (!v->is_array()) return wrong(key, where, "a list of lists of strings");
  std::vector<std::vector<std::string>> out;
  for (const auto& inner : *v) {
    if (!inner.is_array()) return wrong(key, where, "a list of lists of strings");
    std::vector<std::string>& row = out.emplace_back();
    for (const auto& e : inner) {
      if (!e.is_string()) return wrong(key, where, "a list of lists of strings");
      row.push_back(e.get<std::string>());
    }
  }
  return out;
}

Result<std::string> member_string_or(const nlohmann::json& obj, const char* key, std::string fallback,
                                     const std::string& where) {
  if (!member(obj, key)) return fallback;
  return member_string(obj, key, where);
}

Result<uint64_t> member_u64_or(const nlohmann::json& obj, const char* key, uint64_t fallback,
                               const std::string& where) {
  if (!member(obj, key)) return fallback;
  return member_u64(obj, key, where);
}

Result<bool> member_bool_or(const nlohmann::json& obj, const char* key, bool fallback, const std::string& where) {
  const auto* v = member(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean()) return wrong(key, where, "true or false");
  return v->get<bool>();
}

void append_json_u64(std::string& out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void append_json_string(std::string& out, std::string_view text) {
  static const char* kHex = "0123456789abcdef";
  out += '"';
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  out += '"';
}

}  // namespace ptcfs
