// The RPC server: one io thread running Asio coroutines (an acceptor; per connection one
// reader, one writer with a bounded queue, one idle watchdog) and a pool of worker threads
// running the handler, so a long request never blocks the io thread.
#include <utility>  // Boost 1.74's awaitable.hpp needs std::exchange declared first
#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <set>
#include <thread>

#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "transport/address.h"
#include "transport/auth.h"
#include "transport/frame.h"
#include "transport/rpc.h"

namespace ptcfs::transport {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string response_frame(uint32_t id, const Result<json>& r) {
  json body;
  if (r) {
    body = {{"ok", true}, {"result", *r}};
  } else {
    body = {{"ok", false}, {"error", {{"code", code_name(r.status().code())}, {"message", r.status().message()}}}};
  }
  return encode_frame(FrameType::kResponse, id, body.dump());
}

// A frame to send: its bytes, then (data frames) the payload's spans.
struct Outgoing {
  std::string head;
  Payload payload;
  bool progress = false;
};

// The reply to a request: a response frame, or a data frame when it carries bytes.
Outgoing reply_frame(uint32_t id, Result<Reply> r, uint64_t max_payload) {
  if (r && r->payload.size > max_payload)
    r = internal("a reply of " + std::to_string(r->payload.size) + " bytes exceeds the limit of " +
                 std::to_string(max_payload));
  if (!r || r->payload.size == 0)
    return Outgoing{response_frame(id, r ? Result<json>(std::move(r->result)) : Result<json>(r.status())), {}};
  std::string head = encode_data_head(id, json{{"ok", true}, {"result", r->result}}.dump(), r->payload.size);
  return Outgoing{std::move(head), std::move(r->payload)};
}

class Server;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket s, Server& server);
  void start();
  void close();
  // On the io thread. Progress frames are dropped when the queue is full.
  void send(std::string frame, bool droppable) { send(Outgoing{std::move(frame), {}, droppable}); }
  void send(Outgoing frame);
  // Queues a handshake frame (no request behind it).
  void send_control(std::string frame);
  // Sends `why` as an error response with request id 0 in place of anything else and closes
  // once it is out: for a connection the server drops (evicted idle, or refused at the limit).
  void dismiss(const Status& why, bool started);
  // No request running or reply queued: nothing is lost by closing it.
  bool idle() const { return inflight_ <= 0 && out_.empty(); }
  Clock::time_point last_active() const { return last_active_; }

 private:
  // Runs the server's side of transport/auth.h; false when the peer failed it.
  awaitable<bool> authenticate();
  awaitable<void> reader();
  awaitable<void> writer();
  awaitable<void> watchdog();
  void dispatch(uint32_t id, json request);
  // The completion of this connection's coroutines: an exception that ends one is logged,
  // never dropped.
  auto logged_end() const {
    return [peer = peer_](std::exception_ptr e) {
      if (e) log::warn("control connection {} ended by an exception", peer);
    };
  }

  tcp::socket socket_;
  Server& server_;
  std::string peer_;
  asio::steady_timer signal_;
  asio::steady_timer idle_;
  asio::steady_timer slot_;  // cancelled when a request finishes (the reader may go on)
  Clock::time_point deadline_;
  Clock::time_point last_active_ = Clock::now();  // the last request or reply
  std::deque<Outgoing> out_;
  size_t queued_progress_ = 0;
  int inflight_ = 0;          // requests whose response is not queued yet
  std::string nonce_;         // sent in hello when the server has a secret
  bool reader_done_ = false;  // the peer closed or sent a bad frame: close once flushed
};

class Server final : public RpcServer {
 public:
  Server(ServerLimits l, std::string secret)
      : limits_(l), secret_(std::move(secret)), pool_(l.workers), acceptor_(io_) {}
  ~Server() override { stop(); }

  Status listen(const std::string& addr) {
    auto eps = resolve(io_, addr);
    if (!eps) return invalid("listen address: " + eps.status().message());
    const tcp::endpoint ep = *eps->begin();
    boost::system::error_code ec;
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return error(Code::kUnavailable, "cannot listen on " + addr + ": " + ec.message());
    const auto bound = acceptor_.local_endpoint();
    address_ = bound.address().to_string() + ":" + std::to_string(bound.port());
    return Status::ok();
  }

  void serve(Handler handler) override {
    if (io_thread_.joinable() || stopped_) return;
    handler_ = std::move(handler);  // before the io thread starts: every connection sees it
    asio::co_spawn(io_, accept_loop(), [](std::exception_ptr e) {
      if (e) log::error("control acceptor stopped by an exception");
    });
    io_thread_ = std::thread([this] { io_.run(); });
  }

  std::string address() const override { return address_; }

  void stop() override {
    if (stopped_.exchange(true)) return;
    asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      for (auto& w : conns_)
        if (auto c = w.lock()) c->close();
    });
    pool_.join();  // running handlers finish; their replies go nowhere once io stops
    io_.stop();
    if (io_thread_.joinable()) io_thread_.join();
  }

  const ServerLimits& limits() const { return limits_; }
  const std::string& secret() const { return secret_; }
  const Handler& handler() const { return handler_; }
  asio::thread_pool& pool() { return pool_; }
  void forget(Connection* c) {
    for (auto it = conns_.begin(); it != conns_.end();)
      it = (it->expired() || it->lock().get() == c) ? conns_.erase(it) : std::next(it);
  }

 private:
  awaitable<void> accept_loop() {
    while (acceptor_.is_open()) {
      boost::system::error_code ec;
      tcp::socket s = co_await acceptor_.async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (!acceptor_.is_open()) break;
        log::warn("control accept failed: {}", ec.message());
        continue;
      }
      forget(nullptr);
      auto c = std::make_shared<Connection>(std::move(s), *this);
      if (conns_.size() >= limits_.max_connections && !evict_idle()) {
        // Every connection runs a request: tell this client so, rather than letting it hang.
        log::warn("refusing a control connection: all {} connections run requests", conns_.size());
        c->dismiss(error(Code::kUnavailable, "the daemon is busy: all " + std::to_string(conns_.size()) +
                                                 " control connections (its limit) run requests; try again"),
                   false);
        continue;
      }
      conns_.push_back(c);
      c->start();
    }
  }

  // At the connection limit, closes the connection idle longest (no request running: a client
  // holding an unused connection, or one that sent half a frame and stopped), so idle
  // connections never lock clients out. False when every connection is busy.
  bool evict_idle() {
    std::shared_ptr<Connection> victim;
    for (auto& w : conns_)
      if (auto c = w.lock(); c && c->idle() && (!victim || c->last_active() < victim->last_active())) victim = c;
    if (!victim) return false;
    log::info("control connections at the limit ({}): closing the one idle longest", conns_.size());
    forget(victim.get());
    victim->dismiss(error(Code::kUnavailable, "the daemon closed this idle connection: it was at its limit of " +
                                                  std::to_string(limits_.max_connections) + " control connections"),
                    true);
    return true;
  }

  Handler handler_;
  ServerLimits limits_;
  std::string secret_;  // empty: no authentication
  asio::io_context io_;
  asio::thread_pool pool_;
  tcp::acceptor acceptor_;
  std::thread io_thread_;
  std::string address_;
  std::atomic<bool> stopped_{false};
  std::vector<std::weak_ptr<Connection>> conns_;  // io thread only
};

Connection::Connection(tcp::socket s, Server& server)
    : socket_(std::move(s)),
      server_(server),
      signal_(socket_.get_executor()),
      idle_(socket_.get_executor()),
      slot_(socket_.get_executor()) {
  boost::system::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  peer_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  signal_.expires_at(Clock::time_point::max());
  deadline_ = Clock::now() + std::chrono::seconds(server_.secret().empty() ? server_.limits().idle_timeout_s
                                                                           : server_.limits().auth_timeout_s);
}

void Connection::start() {
  auto self = shared_from_this();
  json hello = {{"auth", "none"}};
  if (!server_.secret().empty()) {
    nonce_ = make_nonce();
    hello = {{"auth", "hmac-sha256"}, {"nonce", nonce_}};
  }
  send_control(encode_frame(FrameType::kHello, 0, hello.dump()));
  asio::co_spawn(
      socket_.get_executor(), [self] { return self->reader(); }, logged_end());
  asio::co_spawn(
      socket_.get_executor(), [self] { return self->writer(); }, logged_end());
  asio::co_spawn(
      socket_.get_executor(), [self] { return self->watchdog(); }, logged_end());
}

void Connection::close() {
  boost::system::error_code ec;
  socket_.close(ec);
  signal_.cancel();
  idle_.cancel();
  slot_.cancel();
}

void Connection::send(Outgoing frame) {
  if (frame.progress) {
    if (queued_progress_ >= server_.limits().max_queued_progress) return;
    ++queued_progress_;
  } else {
    --inflight_;
    last_active_ = Clock::now();
    deadline_ = Clock::now() + std::chrono::seconds(server_.limits().idle_timeout_s);
    slot_.cancel_one();
  }
  out_.push_back(std::move(frame));
  signal_.cancel_one();
}

void Connection::dismiss(const Status& why, bool started) {
  out_.clear();
  queued_progress_ = 0;
  out_.push_back(Outgoing{response_frame(0, why), {}});
  reader_done_ = true;
  if (started) {
    signal_.cancel_one();
    return;
  }
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(), [self] { return self->writer(); }, logged_end());
}

void Connection::send_control(std::string frame) {
  out_.push_back(Outgoing{std::move(frame), {}});
  signal_.cancel_one();
}

awaitable<bool> Connection::authenticate() {
  auto refuse = [&](const std::string& why) {
    log::warn("control connection {}: authentication failed: {}", peer_, why);
    ++inflight_;
    send(response_frame(
             0, error(Code::kPermissionDenied, "authentication failed: " + why + " (is the cluster secret the same?)")),
         false);
    return false;
  };
  uint8_t hb[kHeaderSize];
  co_await asio::async_read(socket_, asio::buffer(hb), use_awaitable);
  auto h = decode_header(hb, 4096);
  if (!h) co_return refuse(h.status().message());
  std::string body(h->length, '\0');
  co_await asio::async_read(socket_, asio::buffer(body), use_awaitable);
  if (h->type != FrameType::kAuth) co_return refuse("the client did not authenticate");
  auto j = parse_json_lenient(body);
  if (j.is_discarded() || !j.is_object() || !j.value("nonce", json()).is_string() ||
      !j.value("proof", json()).is_string())
    co_return refuse("malformed authentication frame");
  const std::string nc = j["nonce"].get<std::string>();
  if (nc.size() != nonce_.size() || nc == nonce_) co_return refuse("bad client nonce");
  const std::string& secret = server_.secret();
  if (!proof_matches(j["proof"].get<std::string>(), auth_proof(secret, Role::kClient, nc, nonce_)))
    co_return refuse("wrong proof");
  send_control(
      encode_frame(FrameType::kAuthOk, 0, json{{"proof", auth_proof(secret, Role::kServer, nonce_, nc)}}.dump()));
  deadline_ = Clock::now() + std::chrono::seconds(server_.limits().idle_timeout_s);
  co_return true;
}

// While a request runs, a keepalive frame goes out every keepalive_ms, so that the client's
// idle deadline tells a long request (a repartition's prepare) from a peer that stopped.
// Lives on the io thread: armed by dispatch, stopped when the reply is queued.
class Keepalive : public std::enable_shared_from_this<Keepalive> {
 public:
  Keepalive(std::shared_ptr<Connection> conn, asio::any_io_executor ex, uint32_t id, std::chrono::milliseconds every)
      : conn_(std::move(conn)), timer_(ex), id_(id), every_(every) {}
  void arm() {
    if (every_.count() <= 0) return;
    timer_.expires_after(every_);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->done_) return;
      self->conn_->send(encode_frame(FrameType::kKeepalive, self->id_, ""), true);
      self->arm();
    });
  }
  void stop() {
    done_ = true;
    timer_.cancel();
  }

 private:
  std::shared_ptr<Connection> conn_;
  asio::steady_timer timer_;
  uint32_t id_;
  std::chrono::milliseconds every_;
  bool done_ = false;
};

void Connection::dispatch(uint32_t id, json request) {
  ++inflight_;
  last_active_ = Clock::now();
  auto self = shared_from_this();
  auto ex = socket_.get_executor();
  auto alive = std::make_shared<Keepalive>(self, ex, id, std::chrono::milliseconds(server_.limits().keepalive_ms));
  alive->arm();
  asio::post(server_.pool(), [self, ex, id, alive, request = std::move(request)] {
    auto progress = [self, ex, id](const json& p) {
      asio::post(ex, [self, f = encode_frame(FrameType::kProgress, id, p.dump())]() mutable {
        self->send(std::move(f), true);
      });
    };
    Result<Reply> r = internal("handler did not run");
    try {
      r = self->server_.handler()(request, progress);
    } catch (const std::exception& e) {
      r = internal(std::string("handler threw: ") + e.what());
    }
    asio::post(ex, [self, alive, f = reply_frame(id, std::move(r), self->server_.limits().max_payload)]() mutable {
      alive->stop();
      self->send(std::move(f));
    });
  });
}

awaitable<void> Connection::reader() {
  try {
    const bool authed = server_.secret().empty() || co_await authenticate();
    while (authed && socket_.is_open() && !reader_done_) {
      // At most max_inflight requests of this connection run at once.
      while (inflight_ >= server_.limits().max_inflight && socket_.is_open()) {
        slot_.expires_at(Clock::time_point::max());
        boost::system::error_code ec;
        co_await slot_.async_wait(asio::redirect_error(use_awaitable, ec));
      }
      uint8_t hb[kHeaderSize];
      co_await asio::async_read(socket_, asio::buffer(hb), use_awaitable);
      auto h = decode_header(hb, server_.limits().max_frame);
      if (!h) {
        log::warn("control connection {}: {}; closing it", peer_, h.status().to_string());
        ++inflight_;
        send(response_frame(0, h.status()), false);
        break;
      }
      std::string body(h->length, '\0');
      co_await asio::async_read(socket_, asio::buffer(body), use_awaitable);
      if (reader_done_) break;  // dismissed meanwhile
      if (h->type != FrameType::kRequest) {
        log::warn("control connection {}: unexpected frame type; closing it", peer_);
        break;
      }
      auto j = parse_json(body, "request");
      if (!j || !j->is_object() || !j->contains("op") || !(*j)["op"].is_string()) {
        ++inflight_;
        const bool deep = !j && j.status().message().find("nested deeper") != std::string::npos;
        send(response_frame(h->request_id,
                            deep ? j.status() : invalid("request is not a JSON object with a string 'op'")),
             false);
        continue;
      }
      dispatch(h->request_id, std::move(*j));
    }
  } catch (const boost::system::system_error&) {
    // The peer went away; nothing to report.
  }
  // Let the writer flush what is queued and the responses still to come, then close.
  reader_done_ = true;
  if (out_.empty() && inflight_ <= 0)
    close();
  else
    signal_.cancel_one();
}

awaitable<void> Connection::writer() {
  try {
    while (socket_.is_open()) {
      if (out_.empty()) {
        if (reader_done_ && inflight_ <= 0) break;
        boost::system::error_code ec;
        co_await signal_.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
      Outgoing f = std::move(out_.front());
      out_.pop_front();
      if (f.progress) --queued_progress_;
      std::vector<asio::const_buffer> bufs;
      bufs.reserve(1 + f.payload.spans.size());
      bufs.push_back(asio::buffer(f.head));
      for (const auto& [p, n] : f.payload.spans) bufs.push_back(asio::buffer(p, n));
      co_await asio::async_write(socket_, bufs, use_awaitable);
    }
  } catch (const boost::system::system_error&) {
  }
  close();
  server_.forget(this);
}

awaitable<void> Connection::watchdog() {
  while (socket_.is_open()) {
    idle_.expires_at(deadline_);
    boost::system::error_code ec;
    co_await idle_.async_wait(asio::redirect_error(use_awaitable, ec));
    if (!socket_.is_open()) break;
    if (inflight_ <= 0 && Clock::now() >= deadline_) {
      log::info("control connection {} idle for {} s; closing it", peer_, server_.limits().idle_timeout_s);
      close();
    } else if (Clock::now() >= deadline_) {
      deadline_ = Clock::now() + std::chrono::seconds(server_.limits().idle_timeout_s);
    }
  }
}

}  // namespace

RpcServer::Handler route(std::vector<Route> routes) {
  return [routes = std::move(routes)](const json& request, const ProgressSink& progress) -> Result<Reply> {
    const auto op = request.find("op");
    const std::string name = op != request.end() && op->is_string() ? op->get<std::string>() : "";
    for (const auto& [prefix, handler] : routes)
      if (name.rfind(prefix, 0) == 0) return handler(request, progress);
    return invalid("unknown operation '" + name + "'");
  };
}

Result<std::unique_ptr<RpcServer>> RpcServer::bind(const std::string& listen, ServerLimits limits, std::string secret) {
  auto s = std::make_unique<Server>(limits, std::move(secret));
  PTC_RETURN_IF_ERROR(s->listen(listen));
  return std::unique_ptr<RpcServer>(std::move(s));
}

Result<std::unique_ptr<RpcServer>> RpcServer::start(const std::string& listen, Handler handler, ServerLimits limits,
                                                    std::string secret) {
  PTC_ASSIGN_OR_RETURN(auto s, bind(listen, limits, std::move(secret)));
  s->serve(std::move(handler));
  return s;
}

}  // namespace ptcfs::transport
