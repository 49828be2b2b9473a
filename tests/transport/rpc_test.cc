// The RPC layer over real loopback sockets: data frames, routing by op prefix, and the
// deadlines that keep a client from waiting forever on a peer that stopped answering.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>
#include <thread>

#include "transport/frame.h"
#include "transport/rpc.h"

using namespace ptcfs;
using namespace ptcfs::transport;
using nlohmann::json;

namespace {

std::unique_ptr<RpcServer> serve(RpcServer::Handler h, ServerLimits limits = {}) {
  auto s = RpcServer::start("127.0.0.1:0", std::move(h), limits);
  REQUIRE(s);
  return std::move(s).value();
}

// A socket that listens (the kernel completes connections into its backlog) but never
// accepts or answers: what a SIGSTOPped daemon looks like from outside.
struct SilentListener {
  int fd = -1;
  int port = 0;
  SilentListener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 16) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  ~SilentListener() { ::close(fd); }
};

}  // namespace

TEST_CASE("a data frame's head is coded once: the JSON length and the payload size add up") {
  const std::string head = encode_data_head(7, R"({"ok":true})", 100);
  auto h = decode_header(reinterpret_cast<const uint8_t*>(head.data()), 1 << 20);
  REQUIRE(h);
  CHECK(h->type == FrameType::kData);
  CHECK(h->request_id == 7);
  CHECK(h->length == 4 + 11 + 100);
  auto n = decode_data_json_length(reinterpret_cast<const uint8_t*>(head.data()) + kHeaderSize, h->length);
  REQUIRE(n);
  CHECK(*n == 11);
  CHECK(head.substr(kHeaderSize + 4) == R"({"ok":true})");
  CHECK(decode_data_json_length(reinterpret_cast<const uint8_t*>(head.data()) + kHeaderSize, 10).status().code() ==
        Code::kCorrupt);
  CHECK(decode_data_json_length(reinterpret_cast<const uint8_t*>(head.data()) + kHeaderSize, 3).status().code() ==
        Code::kCorrupt);
}

TEST_CASE("routes pick the handler by the op's prefix, and bytes come back in a data frame") {
  static const std::string bytes = "0123456789";
  auto server = serve(route({{"peer.",
                              [](const json& r, const ProgressSink&) -> Result<Reply> {
                                Reply rep(json{{"who", "peer"}, {"op", r["op"]}});
                                rep.payload.add(bytes.data(), bytes.size());
                                return rep;
                              }},
                             {"", [](const json& r, const ProgressSink&) -> Result<Reply> {
                                return Reply(json{{"who", "control"}, {"op", r["op"]}});
                              }}}));
  auto c = RpcClient::connect(server->address());
  REQUIRE(c);
  auto a = (*c)->call(json{{"op", "status"}});
  REQUIRE(a);
  CHECK((*a)["who"] == "control");
  std::string out;
  auto b = (*c)->call_data(json{{"op", "peer.read"}}, out, 100);
  REQUIRE(b);
  CHECK((*b)["who"] == "peer");
  CHECK(out == bytes);
  auto small = (*c)->call_data(json{{"op", "peer.read"}}, out, 4);
  CHECK(small.status().code() == Code::kCorrupt);
  CHECK((*c)->broken());
}

TEST_CASE("a request that runs longer than the idle deadline succeeds while the server sends keepalives") {
  ServerLimits limits;
  limits.keepalive_ms = 100;
  auto server = serve(
      [](const json&, const ProgressSink&) -> Result<Reply> {
        std::this_thread::sleep_for(std::chrono::milliseconds(1200));
        return Reply(json{{"slept", true}});
      },
      limits);
  Deadlines d;
  d.idle = std::chrono::milliseconds(400);
  auto c = RpcClient::connect(server->address(), "", d);
  REQUIRE(c);
  auto r = (*c)->call(json{{"op", "slow"}});
  REQUIRE(r);
  CHECK((*r)["slept"] == true);
}

TEST_CASE("a server that stops answering fails the call with deadline_exceeded, and the total deadline holds") {
  ServerLimits limits;
  limits.keepalive_ms = 0;  // a wedged handler: nothing more on the wire
  auto server = serve(
      [](const json&, const ProgressSink&) -> Result<Reply> {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return Reply(json::object());
      },
      limits);
  Deadlines d;
  d.idle = std::chrono::milliseconds(300);
  auto c = RpcClient::connect(server->address(), "", d);
  REQUIRE(c);
  auto r = (*c)->call(json{{"op", "wedged"}});
  CHECK(r.status().code() == Code::kDeadlineExceeded);
  CHECK(r.status().message().find("stopped answering") != std::string::npos);
  CHECK((*c)->broken());

  ServerLimits alive;
  alive.keepalive_ms = 50;
  auto slow = serve(
      [](const json&, const ProgressSink&) -> Result<Reply> {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return Reply(json::object());
      },
      alive);
  Deadlines t;
  t.idle = std::chrono::milliseconds(1000);
  t.total = std::chrono::milliseconds(300);
  auto c2 = RpcClient::connect(slow->address(), "", t);
  REQUIRE(c2);
  auto r2 = (*c2)->call(json{{"op", "slow"}});
  CHECK(r2.status().code() == Code::kDeadlineExceeded);
  CHECK(r2.status().message().find("did not finish the request in time") != std::string::npos);
}

TEST_CASE("connecting to a daemon that never says hello fails with deadline_exceeded") {
  SilentListener silent;
  Deadlines d;
  d.connect = std::chrono::milliseconds(300);
  auto c = RpcClient::connect("127.0.0.1:" + std::to_string(silent.port), "", d);
  CHECK(c.status().code() == Code::kDeadlineExceeded);
  // It says what happened: no answer, nothing sent (not that a request took too long).
  CHECK(c.status().message() == "the daemon at 127.0.0.1:" + std::to_string(silent.port) +
                                    " accepted the connection but did not answer within 0.3 s (stopped or "
                                    "overloaded?); nothing was sent");
}

TEST_CASE("at the connection limit with every connection running a request, a new client is told the daemon is busy") {
  ServerLimits limits;
  limits.max_connections = 2;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int running = 0;
  auto server = serve(
      [&](const json&, const ProgressSink&) -> Result<Reply> {
        std::unique_lock lock(mu);
        ++running;
        cv.notify_all();
        cv.wait(lock, [&] { return release; });
        return Reply(json{{"done", true}});
      },
      limits);
  std::vector<std::thread> busy;
  std::vector<bool> ok(2, false);
  for (int i = 0; i < 2; ++i)
    busy.emplace_back([&, i] {
      auto c = RpcClient::connect(server->address(), "");
      if (!c) return;
      auto r = (*c)->call(json{{"op", "hold"}});
      ok[static_cast<size_t>(i)] = r.is_ok();
    });
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return running == 2; }));
  }
  // Both connections run a request: none is idle to close, so the third is refused, saying why.
  Status refused;
  auto third = RpcClient::connect(server->address(), "");
  if (third) {
    auto r = (*third)->call(json{{"op", "hold"}});
    REQUIRE_FALSE(r.is_ok());
    refused = r.status();
  } else {
    refused = third.status();
  }
  CHECK(refused.code() == Code::kUnavailable);
  CHECK(refused.message().find("the daemon is busy: all 2 control connections (its limit) run requests") !=
        std::string::npos);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  for (auto& t : busy) t.join();
  CHECK(ok[0]);
  CHECK(ok[1]);
  CHECK(running == 2);  // the refused client's request never ran
}

TEST_CASE("a bound server answers nothing until it serves, and its handler then sees what was set between") {
  auto bound = RpcServer::bind("127.0.0.1:0");
  REQUIRE(bound);
  RpcServer& s = **bound;
  // The address is known before serving: a handler may report it without racing its writer.
  const std::string addr = s.address();
  REQUIRE(addr.rfind("127.0.0.1:", 0) == 0);
  // A connection made now waits in the backlog: its handshake is not answered.
  Deadlines quick;
  quick.connect = std::chrono::milliseconds(300);
  quick.idle = std::chrono::milliseconds(300);
  CHECK_FALSE(RpcClient::connect(addr, "", quick).is_ok());
  std::string reported = addr;  // set between bind() and serve(), read by the handler
  s.serve([&reported](const json&, const ProgressSink&) { return Result<Reply>(Reply(json{{"listen", reported}})); });
  auto c = RpcClient::connect(addr);
  REQUIRE(c);
  auto r = (*c)->call(json{{"op", "status"}});
  REQUIRE(r);
  CHECK(*r == json{{"listen", addr}});
}

TEST_CASE("a refused connect is kUnavailable naming the address, with the caller's hint only when it gives one") {
  // A port nothing listens on: bound once, then closed.
  int port = 0;
  {
    SilentListener gone;
    port = gone.port;
  }
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  auto peer = RpcClient::connect(addr);  // as a daemon calls its peers: no advice about flags
  REQUIRE_FALSE(peer.is_ok());
  CHECK(peer.status().code() == Code::kUnavailable);
  CHECK(peer.status().message().find("cannot reach the daemon at " + addr) != std::string::npos);
  CHECK(peer.status().message().find("PTCFS_DAEMON") == std::string::npos);
  auto cli = RpcClient::connect(addr, "", {}, "(is ptcfsd running? set --daemon or PTCFS_DAEMON)");
  REQUIRE_FALSE(cli.is_ok());
  CHECK(cli.status().code() == Code::kUnavailable);
  CHECK(cli.status().message().ends_with(" (is ptcfsd running? set --daemon or PTCFS_DAEMON)"));
}

TEST_CASE("a malformed address is kInvalidArgument for the client and the server alike") {
  auto c = RpcClient::connect("127.0.0.1");
  REQUIRE_FALSE(c.is_ok());
  CHECK(c.status().code() == Code::kInvalidArgument);
  CHECK(c.status().message().find("expected HOST:PORT") != std::string::npos);
  auto s = RpcServer::bind("127.0.0.1:http-ish");
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.status().code() == Code::kInvalidArgument);
  CHECK(s.status().message().find("listen address: address '127.0.0.1:http-ish': bad port") == 0);
}
