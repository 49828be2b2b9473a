// JSON request/response over frames: the control protocol between `ptcfs` and `ptcfsd`.
//
// A client sends a request frame {"op": ..., ...}; the server answers with any number of
// progress frames and then one response frame carrying the same request id. Errors travel
// as {"ok": false, "error": {"code": "<ptc::code_name>", "message": ...}} and come back to
// the caller as the same Status.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ptc/status.h"

namespace ptcfs::transport {

using ProgressSink = std::function<void(const nlohmann::json&)>;

struct ServerLimits {
  int auth_timeout_s = 10;        // a connection that has not authenticated by then is closed
  uint32_t max_frame = 1 << 20;   // bytes of one request body
  size_t max_connections = 64;    // more are accepted and closed at once
  int idle_timeout_s = 600;       // a connection with no complete request for this long is closed
  size_t workers = 4;             // handler threads
  size_t max_queued_progress = 64;  // progress frames beyond this are dropped (the response never is)
};

class RpcServer {
 public:
  // Runs on a worker thread; may call progress any number of times before returning.
  using Handler = std::function<ptc::Result<nlohmann::json>(const nlohmann::json& request,
                                                             const ProgressSink& progress)>;

  // Listens on "HOST:PORT" (port 0 picks a free one) and serves until stop(). With a
  // non-empty secret, a connection is served only after it proves it holds the secret
  // (transport/auth.h); a failed proof is answered with permission_denied and closed.
  static ptc::Result<std::unique_ptr<RpcServer>> start(const std::string& listen, Handler handler,
                                                       ServerLimits limits = {}, std::string secret = {});
  virtual ~RpcServer() = default;
  // The bound address, "HOST:PORT".
  virtual std::string address() const = 0;
  // Stops accepting, closes connections and joins the threads. Idempotent.
  virtual void stop() = 0;
};

class RpcClient {
 public:
  // Connects to "HOST:PORT"; kUnavailable with a hint when nothing listens there. When the
  // server asks for authentication, proves it holds `secret` and checks that the server
  // does too; kPermissionDenied when the secret is missing or wrong.
  static ptc::Result<std::unique_ptr<RpcClient>> connect(const std::string& addr, const std::string& secret = {});
  virtual ~RpcClient() = default;
  // Sends a request and waits for its response, passing progress frames to `progress`.
  virtual ptc::Result<nlohmann::json> call(const nlohmann::json& request, const ProgressSink& progress = {}) = 0;
};

}  // namespace ptcfs::transport
