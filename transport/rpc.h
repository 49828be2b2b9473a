// JSON request/response over frames: the control protocol between `ptcfs` and `ptcfsd`.
//
// A client sends a request frame {"op": ..., ...}; the server answers with any number of
// progress frames and then one response frame carrying the same request id. Errors travel
// as {"ok": false, "error": {"code": "<code_name>", "message": ...}} and come back to
// the caller as the same Status. A reply that carries bytes (a peer's region of a tensor)
// is one data frame instead: u32 LE length of the JSON, the JSON response, the bytes. The
// server writes those bytes straight from where they lie (a mapped blob), without a copy.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"

namespace ptcfs::transport {

using ProgressSink = std::function<void(const nlohmann::json&)>;
// Where RpcClient::call_into puts a reply's bytes, piece by piece [off, off + n), in order:
// `place` says where the piece lands (n bytes of memory the caller owns: the piece's place
// in a mapping of the file it belongs in, or a small buffer that stays in the CPU's cache),
// `landed` sees it once it has (a checksum over it costs no second pass through memory; a
// buffered piece is written out). An error from either stops the call and drops the
// connection. A call retried on a new connection starts again at off 0.
struct IntoHooks {
  std::function<Result<std::byte*>(uint64_t off, size_t n)> place;
  std::function<Status(uint64_t off, const std::byte* p, size_t n)> landed;
};

// Bytes a reply carries: spans of memory kept alive by `keep` until they are sent.
struct Payload {
  std::vector<std::pair<const void*, size_t>> spans;
  std::vector<std::shared_ptr<const void>> keep;
  uint64_t size = 0;
  void add(const void* p, size_t n) {
    if (n == 0) return;
    spans.emplace_back(p, n);
    size += n;
  }
};

// A handler's answer: its JSON result and, optionally, bytes.
struct Reply {
  nlohmann::json result;
  Payload payload;
  Reply(nlohmann::json r = nlohmann::json::object()) : result(std::move(r)) {}  // NOLINT: implicit by design
};

struct ServerLimits {
  int auth_timeout_s = 10;          // a connection that has not authenticated by then is closed
  uint32_t max_frame = 1 << 20;     // bytes of one request body
  size_t max_connections = 64;      // at the limit a new connection closes the one idle longest;
                                    // when every one runs a request, the new one is told so
  int idle_timeout_s = 600;         // a connection with no complete request for this long is closed
  size_t workers = 8;               // handler threads
  int max_inflight = 8;             // requests of one connection running at once; its next
                                    // request is read only when one finishes (backpressure)
  uint64_t max_payload = 64 << 20;  // bytes of one data reply
  size_t max_queued_progress = 64;  // progress frames beyond this are dropped (the response never is)
  int keepalive_ms = 1000;          // a running request sends a keepalive frame this often (0: never)
};

// How long a client waits. Every wait has a deadline: a peer that stops answering without
// closing its socket (SIGSTOPped, wedged, partitioned) fails the call with
// kDeadlineExceeded instead of hanging it. The server sends keepalive frames while a request
// runs, so `idle` bounds the silence, not the length of a long request.
struct Deadlines {
  std::chrono::milliseconds connect{5000};  // TCP connect and the authentication handshake
  std::chrono::milliseconds idle{30000};    // the longest wait for the next frame (or bytes of one)
  std::chrono::milliseconds total{0};       // a whole request, from send to response; 0: no limit
};

class RpcServer {
 public:
  // Runs on a worker thread; may call progress any number of times before returning.
  using Handler = std::function<Result<Reply>(const nlohmann::json& request, const ProgressSink& progress)>;

  // Listens on "HOST:PORT" (port 0 picks a free one) and serves until stop(). With a
  // non-empty secret, a connection is served only after it proves it holds the secret
  // (transport/auth.h); a failed proof is answered with permission_denied and closed.
  static Result<std::unique_ptr<RpcServer>> start(const std::string& listen, Handler handler, ServerLimits limits = {},
                                                  std::string secret = {});
  // start() in two steps: bind() listens (connections wait in the kernel's backlog) and
  // serve() starts answering them. Whatever the handler reads that depends on the bound
  // address (the daemon's `status` reports it) is set in between, before any request runs.
  static Result<std::unique_ptr<RpcServer>> bind(const std::string& listen, ServerLimits limits = {},
                                                 std::string secret = {});
  // Once; a second call, or one after stop(), does nothing.
  virtual void serve(Handler handler) = 0;
  virtual ~RpcServer() = default;
  // The bound address, "HOST:PORT".
  virtual std::string address() const = 0;
  // Stops accepting, closes connections and joins the threads. Idempotent.
  virtual void stop() = 0;
};

// One handler made of several, chosen by the prefix of the request's op: the first route
// whose prefix starts the op handles it (prefix "" matches every op). An op no route takes
// is refused as unknown. The daemon routes "peer." to its peer service, the rest to the
// control service.
using Route = std::pair<std::string, RpcServer::Handler>;
RpcServer::Handler route(std::vector<Route> routes);

// Thread-safety: one call at a time per client (calls are not concurrent with each other; use
// one client per thread, as the peer backend's pool does). Errors: kUnavailable (nothing
// listens, the connection broke), kDeadlineExceeded (a deadline passed; the connection is then
// broken()), kPermissionDenied (authentication), kCorrupt (a malformed or oversized frame), and
// any Status the server sent back.
class RpcClient {
 public:
  // Connects to "HOST:PORT"; kUnavailable when nothing listens there, its message followed
  // by `unreachable_hint` when one is given: advice for whoever chose the address, such as
  // the CLI's "(is ptcfsd running? set --daemon or PTCFS_DAEMON)". A daemon calling its
  // peers gives none (the address came from the cluster, not from the user). When the
  // server asks for authentication, proves it holds `secret` and checks that the server
  // does too; kPermissionDenied when the secret is missing or wrong.
  // `deadlines` bound the connect and handshake, and every call.
  static Result<std::unique_ptr<RpcClient>> connect(const std::string& addr, const std::string& secret = {},
                                                    Deadlines deadlines = {}, std::string unreachable_hint = {});
  virtual ~RpcClient() = default;
  // Sends a request and waits for its response, passing progress frames to `progress`.
  virtual Result<nlohmann::json> call(const nlohmann::json& request, const ProgressSink& progress = {}) = 0;
  // Like call, for a request answered with bytes: they are read into `out` (resized), at
  // most `max_bytes` of them; kCorrupt when the reply carries more.
  virtual Result<nlohmann::json> call_data(const nlohmann::json& request, std::string& out, uint64_t max_bytes) = 0;
  // Like call_data, the bytes read where `hooks` place them, in pieces of at most kIntoPiece
  // (no buffer of the whole reply between the socket and the bytes' place). The reply must
  // carry exactly `len` bytes (kCorrupt otherwise, a success without bytes too unless `len`
  // is 0; an error reply carries none).
  virtual Result<nlohmann::json> call_into(const nlohmann::json& request, uint64_t len, const IntoHooks& hooks) = 0;
  static constexpr size_t kIntoPiece = 512 << 10;
  // The calls below use these deadlines (a peer backend tightens `total` per request).
  virtual void set_deadlines(Deadlines d) = 0;
  // The connection broke (lost, timed out, or the daemon sent garbage): it must not be reused.
  virtual bool broken() const = 0;
};

}  // namespace ptcfs::transport
