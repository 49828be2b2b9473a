// The etcd JSON gateway's replies, read without throwing (docs/ARCHITECTURE.md "A cluster"): keys
// and values in base64, 64-bit numbers as strings, error bodies, and the watch stream's lines. Pure
// (no I/O): transport/etcd_client.cc sends the requests, and the fuzz target etcd_reply feeds these
// functions whatever a server could send. A member of another type than the gateway writes is
// ignored or refused, never thrown.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"

namespace ptcfs::transport {

struct EtcdKv {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

// One change a watch saw.
struct EtcdEvent {
  bool deleted = false;
  EtcdKv kv;  // for a delete: the key and mod_revision only
};

// Standard base64, as the gateway carries keys and values (OpenSSL's codec). unb64 refuses what is
// not base64 (kCorrupt).
std::string b64(const std::string& in);
Result<std::string> unb64(const std::string& in);
// The first key after every key that starts with `prefix` (etcd's range_end of a prefix).
std::string prefix_end(std::string prefix);
// A 64-bit member (the gateway writes them as strings); 0 when absent or not a number.
int64_t i64(const nlohmann::json& j, const char* key);
// A string member, or `fallback` when absent or of another type.
std::string str_of(const nlohmann::json& j, const char* key, std::string fallback = {});
// A boolean member; false when absent or of another type.
bool flag_of(const nlohmann::json& j, const char* key);
// A key-value of a range or an event; kInvalidArgument for one that is not an object or whose key
// or value is not a string, kCorrupt for one that is not base64.
Result<EtcdKv> kv_from(const nlohmann::json& j);
// etcd's error body ({"error", "code" (a gRPC code), "message"}) as a Status.
Status etcd_error(const std::string& body, unsigned http_status);

// The lines of a watch's response body: the gateway streams one JSON message per line, in chunks.
// Events go to `on_event`; the first failure is kept (see failed()).
class WatchLines {
 public:
  // Both must outlive this object.
  WatchLines(const std::string& prefix, const std::function<void(const EtcdEvent&)>& on_event)
      : prefix_(prefix), on_event_(on_event) {}

  // A chunk of the body: every line it completes is decoded.
  void feed(std::string_view body);
  // The body ended: decodes its last line when it had no newline.
  void finish();
  // An error message, a cancelled watch or an undecodable event (ok while none came).
  const Status& failed() const { return failed_; }

 private:
  void on_line(const std::string& line);

  const std::string& prefix_;
  const std::function<void(const EtcdEvent&)>& on_event_;
  Status failed_;
  std::string pending_;  // the body after its last newline
};

}  // namespace ptcfs::transport
