// The blocking RPC client. Every socket operation runs as an Asio async operation on the
// client's own io_context, driven by run_until(deadline): a wait that outlives its deadline
// closes the socket and fails with kDeadlineExceeded (Deadlines in transport/rpc.h). Plain
// blocking reads cannot do this: Asio's synchronous ops poll without a timeout.
#include <utility>  // Boost 1.74's awaitable.hpp needs std::exchange declared first
#include <boost/asio.hpp>

#include <algorithm>
#include <cstddef>

#include "ptc/base/json_util.h"
#include "transport/address.h"
#include "transport/auth.h"
#include "transport/frame.h"
#include "transport/rpc.h"

namespace ptcfs::transport {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxResponse = 256 << 20;

std::string seconds_text(Clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

class SyncClient final : public RpcClient {
 public:
  SyncClient(std::string addr, std::string secret, Deadlines d, std::string unreachable_hint)
      : addr_(std::move(addr)),
        secret_(std::move(secret)),
        unreachable_hint_(std::move(unreachable_hint)),
        deadlines_(d),
        socket_(io_) {}

  void set_deadlines(Deadlines d) override { deadlines_ = d; }
  bool broken() const override { return broken_; }

  Status connect() {
    PTC_ASSIGN_OR_RETURN(const auto eps, resolve(io_, addr_));
    const auto deadline = Clock::now() + deadlines_.connect;
    auto ec = run_until(deadline, [&](auto handler) {
      asio::async_connect(socket_, eps,
                          [handler](const boost::system::error_code& e, const tcp::endpoint&) { handler(e); });
    });
    if (ec == asio::error::timed_out)
      return error(Code::kDeadlineExceeded, "the daemon at " + addr_ + " did not accept a connection within " +
                                                seconds_text(deadlines_.connect));
    if (ec) {
      std::string why = "cannot reach the daemon at " + addr_ + ": " + ec.message();
      if (!unreachable_hint_.empty()) why += " " + unreachable_hint_;
      return error(Code::kUnavailable, why);
    }
    socket_.set_option(tcp::no_delay(true), ec);
    auto s = handshake(deadline);
    // The kernel accepted the connection, but the daemon never said hello: it is stopped or
    // swamped. Nothing was sent; say so, not that a request took too long.
    if (s.code() == Code::kDeadlineExceeded && Clock::now() >= deadline)
      return error(Code::kDeadlineExceeded,
                   "the daemon at " + addr_ + " accepted the connection but did not answer within " +
                       seconds_text(deadlines_.connect) + " (stopped or overloaded?); nothing was sent");
    return s;
  }

  Result<json> call(const json& request, const ProgressSink& progress) override {
    return exchange(request, progress, nullptr);
  }

  Result<json> call_data(const json& request, std::string& out, uint64_t max_bytes) override {
    // `out` keeps its size from the last call: resizing it to the same size writes nothing,
    // where clearing it first would zero-fill every chunk (16 MiB) before reading into it.
    const DataDest d{&out, max_bytes, nullptr};
    return exchange(request, {}, &d);
  }

  Result<json> call_into(const json& request, uint64_t len, const IntoHooks& hooks) override {
    const DataDest d{nullptr, len, &hooks};
    return exchange(request, {}, &d);
  }

 private:
  struct Frame {
    FrameType type;
    uint32_t id;
    json body;
    bool had_data = false;  // a data frame, returned as a response
  };

  // Where a data frame's bytes go: into `str` (resized to them, at most `max`), or else
  // where `hooks` place them (exactly `max` of them).
  struct DataDest {
    std::string* str;
    uint64_t max;
    const IntoHooks* hooks;
  };

  // Runs one async operation started by `start(handler)` until it completes or `deadline`
  // passes; on timeout the socket is closed (the connection is broken) and the result is
  // asio::error::timed_out.
  template <class Start>
  boost::system::error_code run_until(Clock::time_point deadline, Start&& start) {
    boost::system::error_code result = asio::error::would_block;
    bool done = false;
    start([&](const boost::system::error_code& ec) {
      result = ec;
      done = true;
    });
    io_.restart();
    io_.run_until(deadline);
    if (!done) {
      // Past the deadline, what has arrived still counts: this process may have been stopped
      // (SIGSTOP, a long pause) while the peer answered, and must not blame it for its own sleep.
      io_.restart();
      io_.poll();
    }
    if (!done) {
      boost::system::error_code ignored;
      socket_.close(ignored);
      io_.restart();
      io_.run();  // lets the cancelled operation finish
      broken_ = true;
      return asio::error::timed_out;
    }
    return result;
  }

  // Reads exactly `n` bytes into p, waiting at most until the earlier of the idle deadline
  // (from now) and `until`.
  Status read_exact(void* p, size_t n, Clock::time_point until) {
    const auto deadline = std::min(Clock::now() + deadlines_.idle, until);
    auto ec = run_until(deadline, [&](auto handler) {
      asio::async_read(socket_, asio::buffer(p, n),
                       [handler](const boost::system::error_code& e, size_t) { handler(e); });
    });
    return check(ec, until);
  }

  Status write_all(const std::string& bytes, Clock::time_point until) {
    const auto deadline = std::min(Clock::now() + deadlines_.idle, until);
    auto ec = run_until(deadline, [&](auto handler) {
      asio::async_write(socket_, asio::buffer(bytes),
                        [handler](const boost::system::error_code& e, size_t) { handler(e); });
    });
    return check(ec, until);
  }

  Status check(const boost::system::error_code& ec, Clock::time_point until) {
    if (!ec) return Status::ok();
    broken_ = true;
    if (ec == asio::error::timed_out) {
      if (Clock::now() >= until)
        return error(Code::kDeadlineExceeded, "the daemon at " + addr_ + " did not finish the request in time");
      return error(Code::kDeadlineExceeded,
                   "the daemon at " + addr_ + " stopped answering (nothing for " + seconds_text(deadlines_.idle) + ")");
    }
    return error(Code::kUnavailable, "connection to the daemon at " + addr_ + " lost: " + ec.message());
  }

  // The server speaks first (transport/auth.h).
  Status handshake(Clock::time_point until) {
    PTC_ASSIGN_OR_RETURN(auto hello, read_frame(until));
    if (hello.type == FrameType::kResponse) return error_of(hello.body);  // refused (e.g. busy)
    if (hello.type != FrameType::kHello) return bad("did not say hello");
    const std::string auth = member_string_or(hello.body, "auth", "", "hello").value_or("");
    if (auth == "none") return Status::ok();
    if (auth != "hmac-sha256") return bad("asks for unknown authentication '" + auth + "'");
    if (secret_.empty())
      return error(
          Code::kPermissionDenied,
          "the daemon at " + addr_ + " requires the cluster secret (give --secret-file or set PTCFS_SECRET_FILE)");
    const std::string ns = member_string_or(hello.body, "nonce", "", "hello").value_or(""), nc = make_nonce();
    const json req = {{"nonce", nc}, {"proof", auth_proof(secret_, Role::kClient, nc, ns)}};
    PTC_RETURN_IF_ERROR(write_all(encode_frame(FrameType::kAuth, 0, req.dump()), until));
    PTC_ASSIGN_OR_RETURN(auto reply, read_frame(until));
    if (reply.type == FrameType::kResponse) return error_of(reply.body);
    if (reply.type != FrameType::kAuthOk) return bad("sent an unexpected frame");
    if (!proof_matches(member_string_or(reply.body, "proof", "", "auth_ok").value_or(""),
                       auth_proof(secret_, Role::kServer, ns, nc)))
      return error(Code::kPermissionDenied, "the daemon at " + addr_ + " does not hold the cluster secret");
    return Status::ok();
  }

  // An error of the caller's in the middle of a frame: the rest of it stays unread.
  Status dropped(Status s) {
    broken_ = true;
    return s;
  }

  Status bad(const std::string& what) {
    broken_ = true;
    return corrupt("daemon at " + addr_ + " " + what);
  }

  // Reads one frame; a data frame's bytes go to `data` (refused when there is none or they
  // are not what it takes), and it is returned as a response.
  Result<Frame> read_frame(Clock::time_point until, const DataDest* data = nullptr) {
    uint8_t hb[kHeaderSize];
    PTC_RETURN_IF_ERROR(read_exact(hb, sizeof hb, until));
    auto h = decode_header(hb, kMaxResponse);
    if (!h) return bad("sent a bad frame: " + h.status().message());
    uint32_t json_len = h->length;
    uint64_t bytes = 0;
    if (h->type == FrameType::kData) {
      uint8_t lb[4];
      if (h->length < 4) return bad("sent a truncated data frame");
      PTC_RETURN_IF_ERROR(read_exact(lb, 4, until));
      auto n = decode_data_json_length(lb, h->length);
      if (!n) return bad("sent a malformed data frame");
      json_len = *n;
      bytes = h->length - 4 - json_len;
      if (!data || bytes > data->max)
        return bad("sent " + std::to_string(bytes) + " bytes where at most " + std::to_string(data ? data->max : 0) +
                   " were asked for");
      if (!data->str && bytes != data->max)
        return bad("sent " + std::to_string(bytes) + " bytes where " + std::to_string(data->max) + " were asked for");
    }
    std::string body(json_len, '\0');
    if (json_len) PTC_RETURN_IF_ERROR(read_exact(body.data(), body.size(), until));
    if (h->type == FrameType::kKeepalive) return Frame{h->type, h->request_id, json::object()};
    if (data && data->str && h->type != FrameType::kData) data->str->clear();
    const bool had_data = h->type == FrameType::kData;
    if (had_data) {
      PTC_RETURN_IF_ERROR(read_data(*data, bytes, until));
      h->type = FrameType::kResponse;
    }
    auto j = parse_json_lenient(body);
    if (j.is_discarded() || !j.is_object()) return bad("sent malformed JSON");
    return Frame{h->type, h->request_id, std::move(j), had_data};
  }

  // The `bytes` bytes of a data frame, into `data`.
  Status read_data(const DataDest& data, uint64_t bytes, Clock::time_point until) {
    if (data.str) {
      data.str->resize(bytes);
      return bytes ? read_exact(data.str->data(), bytes, until) : Status::ok();
    }
    for (uint64_t off = 0; off < bytes; off += kIntoPiece) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kIntoPiece, bytes - off));
      auto p = data.hooks->place(off, n);
      if (!p) return dropped(p.status());
      PTC_RETURN_IF_ERROR(read_exact(*p, n, until));
      if (auto s = data.hooks->landed(off, *p, n); !s) return dropped(s);
    }
    return Status::ok();
  }

  static Status error_of(const json& j) {
    const auto err = j.find("error");
    if (err == j.end() || !err->is_object()) return internal("the daemon sent an error without a code");
    return Status(code_from_name(member_string_or(*err, "code", "internal").value_or("internal")),
                  member_string_or(*err, "message", "unknown error").value_or("unknown error"));
  }

  Result<json> exchange(const json& request, const ProgressSink& progress, const DataDest* data) {
    if (broken_) return error(Code::kUnavailable, "connection to the daemon at " + addr_ + " is broken");
    const auto until = deadlines_.total.count() > 0 ? Clock::now() + deadlines_.total : Clock::time_point::max();
    const uint32_t id = ++next_id_;
    PTC_RETURN_IF_ERROR(write_all(encode_frame(FrameType::kRequest, id, request.dump()), until));
    while (true) {
      PTC_ASSIGN_OR_RETURN(Frame f, read_frame(until, data));
      if (f.type == FrameType::kKeepalive) continue;
      if (f.type == FrameType::kProgress) {
        if (progress) progress(f.body);
        continue;
      }
      if (f.type == FrameType::kResponse && f.id == 0) {  // the daemon closes this connection, saying why
        broken_ = true;
        return error_of(f.body);
      }
      if (f.type != FrameType::kResponse || f.id != id) return bad("sent an unexpected frame");
      if (member_bool_or(f.body, "ok", false).value_or(false)) {
        // A server answers a reply of no bytes with a plain response: only call_into of 0
        // bytes may take one, where the hooks would otherwise never have seen the data.
        if (data && data->hooks && data->max > 0 && !f.had_data)
          return bad("answered without the " + std::to_string(data->max) + " bytes asked for");
        return f.body.contains("result") ? f.body["result"] : json::object();
      }
      return error_of(f.body);
    }
  }

  std::string addr_;
  std::string secret_;
  std::string unreachable_hint_;  // added to "cannot reach" (RpcClient::connect)
  Deadlines deadlines_;
  asio::io_context io_;
  tcp::socket socket_;
  uint32_t next_id_ = 0;
  bool broken_ = false;
};

}  // namespace

Result<std::unique_ptr<RpcClient>> RpcClient::connect(const std::string& addr, const std::string& secret,
                                                      Deadlines deadlines, std::string unreachable_hint) {
  auto c = std::make_unique<SyncClient>(addr, secret, deadlines, std::move(unreachable_hint));
  PTC_RETURN_IF_ERROR(c->connect());
  return std::unique_ptr<RpcClient>(std::move(c));
}

}  // namespace ptcfs::transport
