// Strict helpers for reading JSON documents: typed getters that name the document and the
// member at fault, and a check that an object has no unknown members.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ptc/status.h"

namespace ptc {

// Parses text into JSON without exceptions. Refuses, with `code` and a message naming
// `where`: bad syntax ("not valid JSON"), a raw NUL byte (nlohmann would stop reading
// there, letting what follows pass unread), and a key repeated in one object (nlohmann
// keeps the last one silently; other readers may keep the first).
Result<nlohmann::json> parse_json(std::string_view text, const std::string& where,
                                  Code code = Code::kInvalidArgument);

// kInvalidArgument when `obj` is not an object or holds a member not in `allowed`.
Status check_members(const nlohmann::json& obj, std::initializer_list<std::string_view> allowed,
                     const std::string& where);

// An integer in [lo, hi]; `where` names the member ("ptc.json: tensor 'x': shape[1]").
Result<int64_t> get_int(const nlohmann::json& v, const std::string& where, int64_t lo = INT64_MIN,
                        int64_t hi = INT64_MAX);
Result<std::string> get_string(const nlohmann::json& v, const std::string& where);

}  // namespace ptc
