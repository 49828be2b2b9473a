#include "ptc/json_util.h"

#include <functional>
#include <optional>
#include <set>
#include <vector>

namespace ptc {

namespace {

// Records the first key repeated within one object.
struct DuplicateKeyCheck {
  std::vector<std::set<std::string>> open;  // keys seen in each enclosing object
  std::optional<std::string> duplicate;

  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open.emplace_back();
    } else if (event == E::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == E::key && !open.empty() && !duplicate) {
      if (!open.back().insert(parsed.get<std::string>()).second) duplicate = parsed.get<std::string>();
    }
    return true;
  }
};

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, const std::string& where, Code code) {
  if (text.find('\0') != std::string_view::npos) return Status(code, where + ": not valid JSON (contains a NUL byte)");
  DuplicateKeyCheck dup;
  auto j = nlohmann::json::parse(text.begin(), text.end(), std::ref(dup), /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(code, where + ": not valid JSON");
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
    return invalid(where + ": " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
  return x;
}

Result<std::string> get_string(const nlohmann::json& v, const std::string& where) {
  if (!v.is_string()) return invalid(where + ": expected a string, got " + v.dump());
  return v.get<std::string>();
}

}  // namespace ptc
