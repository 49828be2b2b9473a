#include "transport/etcd_client.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/http.hpp>
#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include "ptc/base/json_util.h"
#include "transport/etcd_connection.h"
#include "transport/etcd_reply.h"

namespace ptcfs::transport {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;

using etcd::Connection;
using etcd::Endpoint;

EtcdCompare EtcdCompare::mod_is(std::string key, int64_t rev) { return {std::move(key), "MOD", rev, {}}; }
EtcdCompare EtcdCompare::lease_is(std::string key, int64_t lease) { return {std::move(key), "LEASE", lease, {}}; }
EtcdCompare EtcdCompare::value_is(std::string key, std::string value) {
  return {std::move(key), "VALUE", 0, std::move(value)};
}
EtcdWrite EtcdWrite::put(std::string key, std::string value, int64_t lease) {
  return {Kind::kPut, std::move(key), std::move(value), lease};
}
EtcdWrite EtcdWrite::erase(std::string key) { return {Kind::kDelete, std::move(key), {}, 0}; }

struct EtcdClient::Impl {
  std::string urls;
  std::vector<Endpoint> endpoints;
  std::chrono::milliseconds timeout;
  std::shared_ptr<asio::ssl::context> tls;  // for https:// endpoints
  std::atomic<size_t> preferred{0};         // the endpoint that last answered

  // One POST to one endpoint. `sent` tells whether the request left (a failure after that
  // may have been applied).
  Result<json> post_to(const Endpoint& ep, const std::string& path, const std::string& body, bool& sent) {
    sent = false;
    asio::io_context ioc;
    Connection conn(ioc, tls.get());
    PTC_RETURN_IF_ERROR(conn.open(ep, timeout));
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, ep.host);
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    beast::error_code failed;
    bool done = false;
    conn.tcp().expires_after(timeout);
    conn.with([&](auto& stream) {
      http::async_write(stream, req, [&](beast::error_code e, size_t) {
        sent = true;
        if (e) {
          failed = e;
          return;
        }
        http::async_read(stream, buf, res, [&](beast::error_code e2, size_t) {
          failed = e2;
          done = !e2;
        });
      });
    });
    ioc.run();
    if (!done) {
      if (failed == beast::error::timeout)
        return error(Code::kDeadlineExceeded, "etcd at " + ep.text + " did not answer " + path + " within " +
                                                  std::to_string(timeout.count()) + " ms");
      return conn.failed(ep, path, failed);
    }
    if (res.result() != http::status::ok) return etcd_error(res.body(), res.result_int());
    json j = parse_json_lenient(res.body());
    if (!j.is_object()) return corrupt("etcd at " + ep.text + " answered " + path + " with no JSON object");
    if (j.contains("error")) return etcd_error(res.body(), res.result_int());
    return j;
  }

  // POSTs to the endpoints in turn until one answers. A call that is not `idempotent` is
  // not sent again once it may have been applied.
  Result<json> post(const std::string& path, const json& body, bool idempotent = true) {
    const std::string text = body.dump();
    const size_t first = preferred.load();
    Status last = unavailable("no etcd endpoint");
    for (size_t i = 0; i < endpoints.size(); ++i) {
      const size_t at = (first + i) % endpoints.size();
      bool sent = false;
      auto r = post_to(endpoints[at], path, text, sent);
      if (r) {
        preferred = at;
        return r;
      }
      const auto code = r.status().code();
      if (code != Code::kUnavailable && code != Code::kDeadlineExceeded) return r.status();
      last = r.status();
      if (sent && !idempotent) return last;
    }
    return last;
  }
};

Result<std::unique_ptr<EtcdClient>> EtcdClient::make(const std::string& urls, std::chrono::milliseconds timeout,
                                                     const EtcdTls& tls) {
  auto impl = std::make_unique<Impl>();
  impl->urls = urls;
  impl->timeout = timeout;
  PTC_ASSIGN_OR_RETURN(impl->endpoints, etcd::parse_endpoints(urls));
  if (impl->endpoints.front().tls) {
    PTC_ASSIGN_OR_RETURN(impl->tls, etcd::make_tls_context(tls));
  } else if (!tls.ca_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty()) {
    // Certificates given for a plain endpoint would be ignored: the records would go in clear.
    return invalid("--etcd-ca, --etcd-cert and --etcd-key need https:// etcd endpoints (--etcd " + urls + ")");
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

const std::string& EtcdClient::urls() const { return impl_->urls; }

Result<int64_t> EtcdClient::grant(int64_t ttl_s) {
  PTC_ASSIGN_OR_RETURN(json r, impl_->post("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}, false));
  const int64_t id = i64(r, "ID");
  if (id == 0) return internal("etcd granted no lease: " + r.dump());
  return id;
}

Result<int64_t> EtcdClient::keep_alive(int64_t lease) {
  PTC_ASSIGN_OR_RETURN(json r, impl_->post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}));
  const json& res = r.contains("result") ? r["result"] : r;
  const int64_t ttl = i64(res, "TTL");
  if (ttl <= 0) return not_found("etcd lease " + std::to_string(lease) + " has expired");
  return ttl;
}

Status EtcdClient::revoke(int64_t lease) {
  auto r = impl_->post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}});
  if (!r && r.status().code() != Code::kNotFound) return r.status();
  return Status::ok();
}

Status EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", b64(key)}, {"value", b64(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  return impl_->post("/v3/kv/put", body).status();
}

Result<std::optional<EtcdKv>> EtcdClient::get(const std::string& key) {
  PTC_ASSIGN_OR_RETURN(json r, impl_->post("/v3/kv/range", json{{"key", b64(key)}}));
  if (!r.contains("kvs") || !r["kvs"].is_array() || r["kvs"].empty()) return std::optional<EtcdKv>();
  PTC_ASSIGN_OR_RETURN(EtcdKv kv, kv_from(r["kvs"][0]));
  return std::optional<EtcdKv>(std::move(kv));
}

Result<EtcdRange> EtcdClient::range_prefix(const std::string& prefix) {
  PTC_ASSIGN_OR_RETURN(json r,
                       impl_->post("/v3/kv/range", json{{"key", b64(prefix)}, {"range_end", b64(prefix_end(prefix))}}));
  EtcdRange out;
  out.revision = r.contains("header") ? i64(r["header"], "revision") : 0;
  if (r.contains("kvs") && r["kvs"].is_array())
    for (const auto& k : r["kvs"]) {
      PTC_ASSIGN_OR_RETURN(EtcdKv kv, kv_from(k));
      out.kvs.push_back(std::move(kv));
    }
  return out;
}

Result<bool> EtcdClient::txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdWrite>& writes) {
  json cmp = json::array();
  for (const auto& c : compares) {
    json j{{"key", b64(c.key)}, {"target", c.target}, {"result", "EQUAL"}};
    if (c.target == "MOD")
      j["mod_revision"] = std::to_string(c.number);
    else if (c.target == "CREATE")
      j["create_revision"] = std::to_string(c.number);
    else if (c.target == "LEASE")
      j["lease"] = std::to_string(c.number);
    else
      j["value"] = b64(c.value);
    cmp.push_back(std::move(j));
  }
  json ops = json::array();
  for (const auto& w : writes) {
    if (w.kind == EtcdWrite::Kind::kDelete) {
      ops.push_back({{"requestDeleteRange", {{"key", b64(w.key)}}}});
      continue;
    }
    json put{{"key", b64(w.key)}, {"value", b64(w.value)}};
    if (w.lease != 0) put["lease"] = std::to_string(w.lease);
    ops.push_back({{"requestPut", std::move(put)}});
  }
  PTC_ASSIGN_OR_RETURN(json r, impl_->post("/v3/kv/txn", json{{"compare", cmp}, {"success", ops}}, false));
  return flag_of(r, "succeeded");
}

namespace {

// One watch on one endpoint: its connection and the streamed response. Every way out of it
// closes the stream and lets its cancelled read finish while what the read refers to (the
// parser, buffer and flags below) is still alive.
class WatchStream {
 public:
  WatchStream(asio::ssl::context* tls, const Endpoint& ep, const std::string& prefix,
              const std::function<void(const EtcdEvent&)>& on_event)
      : ep_(ep), prefix_(prefix), conn_(ioc_, tls), lines_(prefix, on_event) {
    parser_.body_limit(boost::none);
    parser_.on_chunk_body(on_chunk_);
  }
  WatchStream(const WatchStream&) = delete;  // the parser and the reads refer to this object
  WatchStream& operator=(const WatchStream&) = delete;
  ~WatchStream() {
    beast::error_code ignored;
    conn_.tcp().socket().close(ignored);
    ioc_.restart();
    ioc_.run();
  }

  // Connects and sends the watch's create request, each within `timeout`.
  Status start(int64_t start_revision, std::chrono::milliseconds timeout) {
    PTC_RETURN_IF_ERROR(conn_.open(ep_, timeout));
    json create{{"key", b64(prefix_)}, {"range_end", b64(prefix_end(prefix_))}};
    if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
    http::request<http::string_body> req{http::verb::post, "/v3/watch", 11};
    req.set(http::field::host, ep_.host);
    req.set(http::field::content_type, "application/json");
    req.body() = json{{"create_request", create}}.dump();
    req.prepare_payload();
    conn_.tcp().expires_after(timeout);
    busy_ = true;
    conn_.with([&](auto& stream) {
      http::async_write(stream, req, [this](beast::error_code e, size_t) {
        ec_ = e;
        busy_ = false;
      });
    });
    ioc_.run();
    ioc_.restart();
    if (busy_) return unavailable("etcd at " + ep_.text + " did not take the watch of " + prefix_);
    if (ec_) return conn_.failed(ep_, "the watch of " + prefix_, ec_);
    conn_.tcp().expires_never();
    return Status::ok();
  }

  // Reads the stream, passing its events on, until stop() (checked every 200 ms), a
  // failure, or the end of the response.
  Status read(const std::function<bool()>& stop) {
    busy_ = false;
    while (!stop() && lines_.failed().is_ok()) {
      if (!busy_) {
        busy_ = true;
        conn_.with([&](auto& stream) {
          http::async_read_some(stream, buf_, parser_, [this](beast::error_code e, size_t) {
            ec_ = e;
            busy_ = false;
          });
        });
      }
      ioc_.run_for(std::chrono::milliseconds(200));
      ioc_.restart();
      if (!busy_ && ec_) return conn_.failed(ep_, "the watch of " + prefix_, ec_);
      if (parser_.is_done()) return ended();
    }
    return lines_.failed();
  }

 private:
  // The response ended: etcd's error, the failure a line carried, or kUnavailable.
  Status ended() {
    lines_.finish();
    if (lines_.failed().is_ok() && parser_.get().result() != http::status::ok)
      return etcd_error(parser_.get().body(), parser_.get().result_int());
    return lines_.failed().is_ok() ? unavailable("etcd at " + ep_.text + " ended the watch of " + prefix_)
                                   : lines_.failed();
  }

  const Endpoint& ep_;
  const std::string& prefix_;
  asio::io_context ioc_;
  Connection conn_;
  WatchLines lines_;
  http::response_parser<http::string_body> parser_;
  std::function<size_t(uint64_t, beast::string_view, beast::error_code&)> on_chunk_ =
      [this](uint64_t, beast::string_view body, beast::error_code&) -> size_t {
    lines_.feed(std::string_view(body.data(), body.size()));
    return body.size();
  };
  beast::flat_buffer buf_;
  beast::error_code ec_;
  bool busy_ = false;
};

}  // namespace

Status EtcdClient::watch_prefix(const std::string& prefix, int64_t start_revision,
                                const std::function<void(const EtcdEvent&)>& on_event,
                                const std::function<bool()>& stop) {
  const Endpoint& ep = impl_->endpoints[impl_->preferred.load() % impl_->endpoints.size()];
  WatchStream watch(impl_->tls.get(), ep, prefix, on_event);
  PTC_RETURN_IF_ERROR(watch.start(start_revision, impl_->timeout));
  return watch.read(stop);
}

}  // namespace ptcfs::transport
