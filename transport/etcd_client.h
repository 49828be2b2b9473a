// A client of etcd's v3 API through its JSON gateway (POST /v3/kv/range etc., keys and values
// base64 in the wire format, kept plain here), over HTTP/1.1 with Boost.Beast. It knows the
// few calls ptcfs needs: leases (grant, keep alive, revoke), get, put, a prefix range, a
// transaction of compares and writes, and a watch of a prefix.
//
// Every call has a deadline and tries the endpoints in turn, starting with the one that last
// answered, so a cluster of etcd members that lost one keeps serving. Errors: kUnavailable
// (no endpoint answered), kDeadlineExceeded (one accepted the call and went silent),
// kPermissionDenied (TLS refused either way), or etcd's own error (a lease not found is
// kNotFound).
//
// Thread-safety: every method may be called from any thread (each call has its own connection).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ptc/base/status.h"
#include "transport/etcd_reply.h"

namespace ptcfs::transport {

// One condition of a transaction (etcd's Compare, with result EQUAL).
struct EtcdCompare {
  std::string key;
  std::string target;  // "MOD", "CREATE", "LEASE" or "VALUE"
  int64_t number = 0;
  std::string value;
  // The key was last written at revision `rev` (0: the key does not exist).
  static EtcdCompare mod_is(std::string key, int64_t rev);
  // The key exists and is attached to lease `lease`.
  static EtcdCompare lease_is(std::string key, int64_t lease);
  static EtcdCompare value_is(std::string key, std::string value);
};

// One write of a transaction.
struct EtcdWrite {
  enum class Kind { kPut, kDelete } kind = Kind::kPut;
  std::string key, value;
  int64_t lease = 0;
  static EtcdWrite put(std::string key, std::string value, int64_t lease = 0);
  static EtcdWrite erase(std::string key);
};

// A range's keys and the store's revision when it was read (a watch from revision + 1
// misses nothing).
struct EtcdRange {
  std::vector<EtcdKv> kvs;
  int64_t revision = 0;
};

// TLS to etcd's https:// endpoints (docs/DEPLOY.md "etcd and TLS"): the CA that signed etcd's
// certificate (empty: the system's CAs), and this client's certificate and key (PEM files),
// which etcd started with --client-cert-auth requires.
struct EtcdTls {
  std::string ca_file, cert_file, key_file;
};

class EtcdClient {
 public:
  // `urls`: comma-separated http://HOST:PORT endpoints, or https://HOST:PORT ones spoken to
  // with `tls`. kInvalidArgument names a bad endpoint or certificate file, or TLS files given
  // for http:// endpoints. A TLS connection etcd refuses (or whose certificate does not
  // verify) fails every call with kPermissionDenied.
  static Result<std::unique_ptr<EtcdClient>> make(const std::string& urls,
                                                  std::chrono::milliseconds timeout = std::chrono::seconds(2),
                                                  const EtcdTls& tls = {});
  ~EtcdClient();

  const std::string& urls() const;

  // A lease of `ttl_s` seconds; its id.
  Result<int64_t> grant(int64_t ttl_s);
  // Renews the lease; its remaining TTL in seconds, kNotFound when it has expired.
  Result<int64_t> keep_alive(int64_t lease);
  Status revoke(int64_t lease);
  Status put(const std::string& key, const std::string& value, int64_t lease = 0);
  Result<std::optional<EtcdKv>> get(const std::string& key);
  Result<EtcdRange> range_prefix(const std::string& prefix);
  // Applies `writes` atomically if every compare holds; whether they held.
  Result<bool> txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdWrite>& writes);

  // Calls on_event for every change of a key under `prefix` from `start_revision` on, in
  // order, until `stop()` returns true (asked every 200 ms) or the stream fails (its error;
  // the caller watches again from the revision after the last event it saw). kOutOfRange
  // when start_revision was compacted away.
  Status watch_prefix(const std::string& prefix, int64_t start_revision,
                      const std::function<void(const EtcdEvent&)>& on_event, const std::function<bool()>& stop);

 private:
  struct Impl;
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ptcfs::transport
