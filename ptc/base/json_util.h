// Strict helpers for reading JSON documents: typed getters that name the document and the
// member at fault, and a check that an object has no unknown members.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"

namespace ptcfs {

// No JSON ptcfs reads nests deeper than this (a ptc.json has 4 levels); deeper input is
// refused before a DOM is built.
inline constexpr size_t kMaxJsonDepth = 64;

// Parses text into JSON without exceptions. Refuses, with `code` and a message naming
// `where`: nesting deeper than kMaxJsonDepth, bad syntax ("not valid JSON"), a raw NUL byte (nlohmann would stop
// reading there, letting what follows pass unread), and a key repeated in one object (nlohmann keeps the last one
// silently; other readers may keep the first).
Result<nlohmann::json> parse_json(std::string_view text, const std::string& where, Code code = Code::kInvalidArgument);

// nlohmann's parse(text, nullptr, false) with the depth bound: a discarded value when the
// text is not JSON or nests deeper than kMaxJsonDepth. For replies of peers and etcd, whose
// callers only ask "is it an object with these members".
nlohmann::json parse_json_lenient(std::string_view text);

// kInvalidArgument when `obj` is not an object or holds a member not in `allowed`.
Status check_members(const nlohmann::json& obj, std::initializer_list<std::string_view> allowed,
                     const std::string& where);

// An integer in [lo, hi]; `where` names the member ("ptc.json: tensor 'x': shape[1]").
Result<int64_t> get_int(const nlohmann::json& v, const std::string& where, int64_t lo = INT64_MIN,
                        int64_t hi = INT64_MAX);
Result<std::string> get_string(const nlohmann::json& v, const std::string& where);

// Members of a request or a reply (`where`: "request", "reply of node n1"), read without
// exceptions: kInvalidArgument "<where> lacks 'key'" when absent, "<where> field 'key' must
// be ..." when of another type. The *_or forms give `fallback` when the member is absent
// (and still refuse a member of the wrong type).
Result<std::string> member_string(const nlohmann::json& obj, const char* key, const std::string& where = "request");
Result<uint64_t> member_u64(const nlohmann::json& obj, const char* key, const std::string& where = "request");
Result<std::vector<std::string>> member_strings(const nlohmann::json& obj, const char* key,
                                                const std::string& where = "request");
// A list of lists of strings (per shard, the ids of its nodes).
Result<std::vector<std::vector<std::string>>> member_string_lists(const nlohmann::json& obj, const char* key,
                                                                  const std::string& where = "request");
// A list of GPU counts (integers from 1 to 2^20) per node of a placement; empty when absent.
Result<std::vector<int>> member_gpus_or_empty(const nlohmann::json& obj, const char* key,
                                              const std::string& where = "request");
Result<std::string> member_string_or(const nlohmann::json& obj, const char* key, std::string fallback,
                                     const std::string& where = "request");
Result<uint64_t> member_u64_or(const nlohmann::json& obj, const char* key, uint64_t fallback,
                               const std::string& where = "request");
Result<bool> member_bool_or(const nlohmann::json& obj, const char* key, bool fallback,
                            const std::string& where = "request");

// JSON written as text, for documents too large to build as a DOM first (a step of 100,000
// tensors): an unsigned integer, and `text` as a quoted, escaped JSON string, at the end of `out`.
void append_json_u64(std::string& out, uint64_t v);
void append_json_string(std::string& out, std::string_view text);

}  // namespace ptcfs
