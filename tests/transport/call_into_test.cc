// RpcClient::call_into and PeerBackend::call_into over real loopback sockets: a data reply's
// bytes arrive piece by piece where the caller's hooks place them, and every way the reply
// can differ from what was asked for fails the call.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "transport/backend.h"
#include "transport/rpc.h"

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
// spans that do not line up with the client's pieces; "peer.missing" with not_found.
std::unique_ptr<RpcServer> serve_bytes() {
  auto s = RpcServer::start("127.0.0.1:0", [](const json& r, const ProgressSink&) -> ptc::Result<Reply> {
    if (r["op"] == "peer.missing") return ptc::not_found("no such slice");
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
    h.place = [this](uint64_t off, size_t n) -> ptc::Result<std::byte*> {
      placed.emplace_back(off, n);
      return buf.data();
    };
    h.landed = [this](uint64_t off, const std::byte* p, size_t n) {
      landed.emplace_back(off, n);
      if (got.size() < off + n) got.resize(off + n);
      std::memcpy(got.data() + off, p, n);
      return ptc::Status::ok();
    };
    return h;
  }
};

}  // namespace

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
    CHECK(r.status().code() == ptc::Code::kCorrupt);
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
  CHECK(r.status().code() == ptc::Code::kNotFound);
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
    h.landed = [&](uint64_t off, const std::byte* p, size_t len) -> ptc::Status {
      if (off > 0) return ptc::Status(ptc::Code::kResourceExhausted, "the disk is full");
      return inner(off, p, len);
    };
    auto r = (*c)->call_into(json{{"op", "peer.read"}, {"n", n}}, n, h);
    CHECK(r.status().code() == ptc::Code::kResourceExhausted);
    CHECK(rx.landed.size() == 1);
    CHECK(rx.placed.size() == 2);  // the third piece was never placed
    CHECK((*c)->broken());
  }
  SECTION("place fails on the first piece") {
    auto c = RpcClient::connect(server->address());
    REQUIRE(c);
    IntoHooks h;
    h.place = [](uint64_t, size_t) -> ptc::Result<std::byte*> { return ptc::internal("no room"); };
    h.landed = [](uint64_t, const std::byte*, size_t) { return ptc::Status::ok(); };
    auto r = (*c)->call_into(json{{"op", "peer.read"}, {"n", n}}, n, h);
    CHECK(r.status().code() == ptc::Code::kInternal);
    CHECK((*c)->broken());
  }
}

TEST_CASE("the TCP backend's call_into reads the bytes in, counts them and reuses the connection") {
  auto server = serve_bytes();
  ptc::ClusterConfig cluster;
  cluster.nodes.push_back(ptc::NodeSpec{"n0", server->address(), 1});
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
  CHECK(bad.status().code() == ptc::Code::kNotFound);
  CHECK_THAT(bad.status().message(), Catch::Contains("node n0"));
  CHECK(backend->bytes_received() == 2 * n);
}
