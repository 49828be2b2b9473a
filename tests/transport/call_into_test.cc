// RpcClient::call_into and PeerBackend::call_into over real loopback sockets: a data reply's
// bytes arrive piece by piece where the caller's hooks place them, and every way the reply
// can differ from what was asked for fails the call.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "transport/backend.h"
#include "transport/rpc.h"

using namespace ptcfs;
using namespace ptcfs::transport;
using nlohmann::json;

namespace {

constexpr size_t kPiece = RpcClient::kIntoPiece;

// 2.5 pieces and 7 bytes, every byte a function of its position.
std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
  return s;
}

const std::string& payload() {
  static const std::string p = pattern(2 * kPiece + kPiece / 2 + 7);
  return p;
}

// Answers {"op": "peer.read", "n": N} with the first N bytes of payload(), sent as three
// spans that do not line up with the client's pieces; "peer.missing" with not_found;
// "peer.plain" with a success that carries no bytes (a plain response frame).
std::unique_ptr<RpcServer> serve_bytes() {
  auto s = RpcServer::start("127.0.0.1:0", [](const json& r, const ProgressSink&) -> Result<Reply> {
    if (r["op"] == "peer.missing") return not_found("no such slice");
    if (r["op"] == "peer.plain") return Reply(json{{"plain", true}});
    const size_t n = r["n"].get<size_t>();
    Reply rep(json{{"n", n}});
    const size_t a = std::min(n, size_t{1000}), b = std::min(n, kPiece + 3);
    rep.payload.add(payload().data(), a);
    rep.payload.add(payload().data() + a, b - a);
    rep.payload.add(payload().data() + b, n - b);
    return rep;
  });
  REQUIRE(s);
  return std::move(s).value();
}

// Hooks that place every piece in one small buffer (as a cluster prepare does) and copy
// what landed to its place in `got`, recording each piece.
struct Receiver {
  std::vector<std::byte> buf = std::vector<std::byte>(kPiece);
  std::string got;
  std::vector<std::pair<uint64_t, size_t>> placed, landed;
  IntoHooks hooks() {
    IntoHooks h;
    h.place = [this](uint64_t off, size_t n) -> Result<std::byte*> {
      placed.emplace_back(off, n);
      return buf.data();
    };
    h.landed = [this](uint64_t off, const std::byte* p, size_t n) {
      landed.emplace_back(off, n);
      if (got.size() < off + n) got.resize(off + n);
      std::memcpy(got.data() + off, p, n);
      return Status::ok();
    };
    return h;
  }
};

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

// Copies bytes both ways between sockets a and b until either side closes, then closes both.
void pass_both_ways(int a, int b) {
  pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  std::vector<char> buf(1 << 16);
  for (bool open = true; open && ::poll(fds, 2, -1) > 0;)
    for (int i = 0; i < 2 && open; ++i) {
      if (fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
      open = n > 0;
      for (const char* p = buf.data(); open && n > 0; p += n > 0 ? n : 0) {
        const ssize_t w = ::send(fds[1 - i].fd, p, static_cast<size_t>(n), MSG_NOSIGNAL);
        open = w > 0;
        n -= w;
      }
    }
  ::close(a);
  ::close(b);
}

// A loopback proxy in front of the server at `upstream` ("127.0.0.1:PORT") that counts the
// connections it accepts. Clients must close theirs before it is destroyed.
struct CountingProxy {
  int fd = -1;
  int port = 0;
  std::atomic<int> accepted{0};
  std::vector<std::thread> pipes;  // the acceptor's until it is joined
  std::thread acceptor;
  explicit CountingProxy(const std::string& upstream) {
    const int up = std::stoi(upstream.substr(upstream.rfind(':') + 1));
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(0);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 16) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    acceptor = std::thread([this, up] {
      for (int c; (c = ::accept(fd, nullptr, nullptr)) >= 0;) {
        ++accepted;
        const int s = ::socket(AF_INET, SOCK_STREAM, 0);
        const sockaddr_in to = loopback(up);
        if (::connect(s, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
          ::close(s);
          ::close(c);
          continue;
        }
        pipes.emplace_back(pass_both_ways, c, s);
      }
    });
  }
  ~CountingProxy() {
    ::shutdown(fd, SHUT_RDWR);  // wakes the accept
    acceptor.join();
    for (auto& t : pipes) t.join();
    ::close(fd);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

}  // namespace

TEST_CASE("call_into: a success without the bytes asked for is kCorrupt, unless none were asked for") {
  auto server = serve_bytes();
  auto c = RpcClient::connect(server->address());
  REQUIRE(c);
  Receiver rx;
  auto none = (*c)->call_into(json{{"op", "peer.plain"}}, 0, rx.hooks());
  REQUIRE(none);
  CHECK(*none == json{{"plain", true}});
  CHECK_FALSE((*c)->broken());
  auto r = (*c)->call_into(json{{"op", "peer.plain"}}, 10, rx.hooks());
  CHECK(r.status().code() == Code::kCorrupt);
  CHECK(r.status().message() == "daemon at " + server->address() + " answered without the 10 bytes asked for");
  CHECK(rx.placed.empty());
  CHECK(rx.landed.empty());
  CHECK((*c)->broken());
}

TEST_CASE("call_into: the bytes land piece by piece where the hooks place them, exactly as sent") {
  auto server = serve_bytes();
  auto c = RpcClient::connect(server->address());
  REQUIRE(c);
  const size_t n = payload().size();
  Receiver rx;
  auto r = (*c)->call_into(json{{"op", "peer.read"}, {"n", n}}, n, rx.hooks());
  REQUIRE(r);
  CHECK((*r)["n"] == n);
  CHECK(rx.got == payload());
  const std::vector<std::pair<uint64_t, size_t>> pieces{{0, kPiece}, {kPiece, kPiece}, {2 * kPiece, kPiece / 2 + 7}};
  CHECK(rx.placed == pieces);
  CHECK(rx.landed == pieces);
  CHECK_FALSE((*c)->broken());

  // The connection goes on: a reply of one byte, then one of exactly one piece.
  for (size_t len : {size_t{1}, kPiece}) {
    Receiver again;
    auto r2 = (*c)->call_into(json{{"op", "peer.read"}, {"n", len}}, len, again.hooks());
    REQUIRE(r2);
    CHECK(again.got == payload().substr(0, len));
    CHECK(again.landed.size() == 1);
  }
}

TEST_CASE("call_into: a reply of another size than asked for is kCorrupt and drops the connection") {
  auto server = serve_bytes();
  for (const size_t sent : {size_t{100}, size_t{102}}) {
    auto c = RpcClient::connect(server->address());
    REQUIRE(c);
    Receiver rx;
    auto r = (*c)->call_into(json{{"op", "peer.read"}, {"n", sent}}, 101, rx.hooks());
    CHECK(r.status().code() == Code::kCorrupt);
    CHECK_THAT(r.status().message(), Catch::Contains(std::to_string(sent) + " bytes where"));
    CHECK(rx.placed.empty());  // nothing of it was read
    CHECK((*c)->broken());
  }
}

TEST_CASE("call_into: the peer's error comes back as its Status, the hooks untouched, the connection kept") {
  auto server = serve_bytes();
  auto c = RpcClient::connect(server->address());
  REQUIRE(c);
  Receiver rx;
  auto r = (*c)->call_into(json{{"op", "peer.missing"}}, 10, rx.hooks());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK(r.status().message() == "no such slice");
  CHECK(rx.placed.empty());
  CHECK_FALSE((*c)->broken());
  auto ok = (*c)->call_into(json{{"op", "peer.read"}, {"n", 10}}, 10, rx.hooks());
  REQUIRE(ok);
  CHECK(rx.got == payload().substr(0, 10));
}

TEST_CASE("call_into: an error of the hooks stops the call mid-reply and drops the connection") {
  auto server = serve_bytes();
  const size_t n = payload().size();
  SECTION("landed fails on the second piece") {
    auto c = RpcClient::connect(server->address());
    REQUIRE(c);
    Receiver rx;
    IntoHooks h = rx.hooks();
    auto inner = h.landed;
    h.landed = [&](uint64_t off, const std::byte* p, size_t len) -> Status {
      if (off > 0) return Status(Code::kResourceExhausted, "the disk is full");
      return inner(off, p, len);
    };
    auto r = (*c)->call_into(json{{"op", "peer.read"}, {"n", n}}, n, h);
    CHECK(r.status().code() == Code::kResourceExhausted);
    CHECK(rx.landed.size() == 1);
    CHECK(rx.placed.size() == 2);  // the third piece was never placed
    CHECK((*c)->broken());
  }
  SECTION("place fails on the first piece") {
    auto c = RpcClient::connect(server->address());
    REQUIRE(c);
    IntoHooks h;
    h.place = [](uint64_t, size_t) -> Result<std::byte*> { return internal("no room"); };
    h.landed = [](uint64_t, const std::byte*, size_t) { return Status::ok(); };
    auto r = (*c)->call_into(json{{"op", "peer.read"}, {"n", n}}, n, h);
    CHECK(r.status().code() == Code::kInternal);
    CHECK((*c)->broken());
  }
}

TEST_CASE("the TCP backend's call_into reads the bytes in, counts them and reuses the connection") {
  auto server = serve_bytes();
  CountingProxy proxy(server->address());
  ptc::ClusterConfig cluster;
  cluster.nodes.push_back(ptc::NodeSpec{"n0", proxy.address(), 1});
  auto backend = make_tcp_backend(cluster, "");
  const size_t n = payload().size();
  for (int round = 0; round < 2; ++round) {
    Receiver rx;
    auto r = backend->call_into(0, json{{"op", "peer.read"}, {"n", n}}, n, rx.hooks());
    REQUIRE(r);
    CHECK(rx.got == payload());
  }
  CHECK(backend->bytes_received() == 2 * n);
  Receiver rx;
  auto bad = backend->call_into(0, json{{"op", "peer.missing"}}, 5, rx.hooks());
  CHECK(bad.status().code() == Code::kNotFound);
  CHECK_THAT(bad.status().message(), Catch::Contains("node n0"));
  CHECK(backend->bytes_received() == 2 * n);
  CHECK(proxy.accepted == 1);  // three calls, the error's too, on one connection
  backend.reset();             // closes it, so the proxy can stop
}
