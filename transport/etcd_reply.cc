#include "transport/etcd_reply.h"

#include <openssl/evp.h>

#include "ptc/base/json_util.h"

namespace ptcfs::transport {

using nlohmann::json;

// etcd's JSON gateway carries keys and values as standard base64 (OpenSSL's codec).
std::string b64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> unb64(const std::string& in) {
  if (in.size() % 4 != 0)
    return corrupt("etcd sent a value that is not base64 (length " + std::to_string(in.size()) + ")");
  std::string out(in.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  if (n < 0) return corrupt("etcd sent a value that is not base64");
  // EVP_DecodeBlock counts the padding as zero bytes.
  const size_t pad = in.empty() ? 0 : (in.back() == '=') + (in.size() > 1 && in[in.size() - 2] == '=');
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

// The first key after every key that starts with `prefix` (etcd's range_end of a prefix).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<uint8_t>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// The gateway writes 64-bit numbers as strings.
int64_t i64(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

// A member of an etcd reply: a string, or `fallback` when absent or of another type (json::value
// would throw on another type; a reply never makes the client throw).
std::string str_of(const json& j, const char* key, std::string fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
bool flag_of(const json& j, const char* key) {
  if (!j.is_object()) return false;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

Result<EtcdKv> kv_from(const json& j) {
  if (!j.is_object()) return invalid("etcd: a key-value in a reply is not an object");
  for (const char* k : {"key", "value"})
    if (j.contains(k) && !j[k].is_string())
      return invalid(std::string("etcd: a key-value's '") + k + "' is not a string");
  EtcdKv kv;
  PTC_ASSIGN_OR_RETURN(kv.key, unb64(str_of(j, "key")));
  PTC_ASSIGN_OR_RETURN(kv.value, unb64(str_of(j, "value")));
  kv.create_revision = i64(j, "create_revision");
  kv.mod_revision = i64(j, "mod_revision");
  kv.version = i64(j, "version");
  kv.lease = i64(j, "lease");
  return kv;
}

// etcd's error body ({"error", "code" (a gRPC code), "message"}) as a Status.
Status etcd_error(const std::string& body, unsigned http_status) {
  json j = parse_json_lenient(body);
  const std::string msg = str_of(j, "message", body);
  const int code = static_cast<int>(i64(j, "code"));
  const std::string text = "etcd: " + msg;
  switch (code) {
    case 3:
      return invalid(text);
    case 4:
      return error(Code::kDeadlineExceeded, text);
    case 5:
      return not_found(text);
    case 9:
      return error(Code::kFailedPrecondition, text);
    case 11:
      return error(Code::kOutOfRange, text);
    case 14:
      return unavailable(text);
    default:
      return internal(text + " (HTTP " + std::to_string(http_status) + ")");
  }
}

void WatchLines::feed(std::string_view body) {
  pending_.append(body.data(), body.size());
  for (size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
    on_line(pending_.substr(0, nl));
    pending_.erase(0, nl + 1);
  }
}

void WatchLines::finish() {
  if (!pending_.empty()) on_line(pending_);
  pending_.clear();
}

void WatchLines::on_line(const std::string& line) {
  json j = parse_json_lenient(line);
  if (!j.is_object()) return;
  if (j.contains("error")) {
    failed_ = etcd_error(line, 200);
    return;
  }
  const json& res = j.contains("result") ? j["result"] : j;
  if (flag_of(res, "canceled")) {
    if (i64(res, "compact_revision") > 0)
      failed_ = error(Code::kOutOfRange, "etcd compacted the revisions the watch of " + prefix_ + " needs");
    else
      failed_ = unavailable("etcd cancelled the watch of " + prefix_ + ": " + str_of(res, "cancel_reason"));
    return;
  }
  if (!res.is_object() || !res.contains("events") || !res["events"].is_array()) return;
  for (const auto& e : res["events"]) {
    EtcdEvent ev;
    ev.deleted = str_of(e, "type") == "DELETE";
    auto kv = kv_from(e.is_object() && e.contains("kv") ? e["kv"] : json::object());
    if (!kv) {
      failed_ = kv.status();
      return;
    }
    ev.kv = std::move(kv).value();
    on_event_(ev);
  }
}

}  // namespace ptcfs::transport
