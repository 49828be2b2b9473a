// Follower (daemon/cluster/follower.h): two nodes in one process, each with its own store and
// peer service, the second served on a loopback port and asked over the TCP peer backend, as the
// daemon does. The first node follows records it is behind on.
#include "daemon/cluster/follower.h"

#include <catch2/catch.hpp>

#include "daemon/change/local_runner.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/peer_service.h"
#include "daemon/save/save_service.h"
#include "tests/daemon/cluster/record_fixture.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/daemon/temp_dir.h"
#include "transport/rpc.h"

namespace ptcfs::testing {
namespace {

// One node of the pair: its store, its peer service (answering peer.* for it) and a local runner
// that makes its steps.
struct Half {
  Half(const std::string& dir, transport::PeerBackend& backend, int self)
      : store(open_store(dir)),
        saves(*store, {}, {}),
        members(backend),
        parts(*store, members, saves, node_id(*backend.cluster(), self)),
        service(*store, backend, self, members, saves, parts, PrepareOptions{}),
        runner(*store, saves, CompactionPolicy{}) {}
  std::unique_ptr<Store> store;
  SaveService saves;
  StaticMembership members;
  Participant parts;
  PeerService service;
  LocalRunner runner;
};

ptc::ClusterConfig pair(const std::string& n1_addr) {
  ptc::ClusterConfig c;
  c.nodes = {{"n0", "127.0.0.1:1", 2}, {"n1", n1_addr, 2}};
  return c;
}

KeyedRecord step_record(uint64_t version, bool removed = false, const std::string& tx = "") {
  return step_record_of("job", "1", version, removed, tx);
}

struct Pair {
  explicit Pair(const std::string& root)
      : n1_backend(transport::make_tcp_backend(pair("127.0.0.1:1"), "")),
        n1(root + "/n1", *n1_backend, 1),
        server(serve(n1.service)),
        n0_backend(transport::make_tcp_backend(pair(server->address()), "")),
        n0(root + "/n0", *n0_backend, 0),
        n0_client(*n0_backend, 0, n0.service),
        follower(*n0.store, n0_client, n0.parts, n0.members, [this] { ++woken; }) {
    write_checkpoint(root + "/ckpt", kPtcJson);
    for (Half* h : {&n0, &n1})
      REQUIRE(h->runner.import(ImportRequest{root + "/ckpt", "job", "1", {}, std::nullopt, std::nullopt}, {}).is_ok());
  }
  ~Pair() { server->stop(); }

  static std::unique_ptr<transport::RpcServer> serve(PeerService& service) {
    auto s = transport::RpcServer::start(
        "127.0.0.1:0",
        [&service](const nlohmann::json& req, const transport::ProgressSink&) { return service.handle(req); });
    REQUIRE(s.is_ok());
    return std::move(s).value();
  }

  std::unique_ptr<transport::PeerBackend> n1_backend;
  Half n1;
  std::unique_ptr<transport::RpcServer> server;
  std::unique_ptr<transport::PeerBackend> n0_backend;
  Half n0;
  PeerClient n0_client;
  int woken = 0;  // the follower's wake-ups of the catch-up ticker
  Follower follower;
};

}  // namespace

TEST_CASE("a follower brings a step to the version a record names, from the node that serves it", "[follower]") {
  TempDir tmp;
  Pair p(tmp.path());
  REQUIRE(p.n1.runner.repartition(RepartitionRequest{"job", "1", ptc::Parallelism{1, 2, 2}, false, {}, 0}, {}).is_ok());
  p.follower.on_record(step_record(2, false, find_step(*p.n1.store, "job", "1")->origin()));
  CHECK(p.woken == 1);  // the watch thread asks no peer: the catch-up ticker does
  CHECK(find_step(*p.n0.store, "job", "1")->version() == 1);
  CHECK(p.follower.catch_up_records().empty());
  const auto v = find_step(*p.n0.store, "job", "1");
  CHECK(v->version() == 2);
  CHECK(v->layout().parallelism().tp == 1);
  CHECK(v->layout().parallelism().dp == 2);
}

TEST_CASE("a follower names the records no node serves yet, and applies a removal at once", "[follower]") {
  TempDir tmp;
  Pair p(tmp.path());
  p.follower.on_record(step_record(3));
  const auto left = p.follower.catch_up_records();
  REQUIRE(left.size() == 1);
  CHECK(left[0].what() == "step job/1 version 3");
  CHECK(find_step(*p.n0.store, "job", "1")->version() == 1);
  // The removal's record is newer: the node removes the step on the watch thread, and is behind
  // on nothing.
  p.follower.on_record(step_record(0, true));
  CHECK(p.n0.store->snapshot()->steps.count({"job", "1"}) == 0);
  CHECK(p.follower.catch_up_records().empty());
}

}  // namespace ptcfs::testing

namespace ptcfs::testing {

TEST_CASE("a follower replaces a step removed and saved again under its name while it was away", "[follower]") {
  // Both nodes hold version 1 of job/1, each under its own origin (each imported it alone): etcd's
  // record names n1's. n0's version has the record's number and another origin: it is behind, and
  // takes n1's version 1 (holding none of it).
  TempDir tmp;
  Pair p(tmp.path());
  const auto mine = find_step(*p.n0.store, "job", "1");
  const auto theirs = find_step(*p.n1.store, "job", "1");
  REQUIRE(mine->origin() != theirs->origin());
  p.follower.on_record(step_record(1, false, theirs->origin()));
  CHECK(p.woken == 1);
  CHECK(find_step(*p.n0.store, "job", "1") == mine);  // not on the watch thread
  CHECK(p.follower.catch_up_records().empty());
  const auto v = find_step(*p.n0.store, "job", "1");
  CHECK(v != mine);
  CHECK(v->version() == 1);
  CHECK(v->origin() == theirs->origin());
  CHECK(v->placement().nodes == theirs->placement().nodes);
  // A record that names an origin no node serves leaves the step as it is, and is named.
  p.follower.on_record(step_record(1, false, "nobody"));
  const auto left = p.follower.catch_up_records();
  REQUIRE(left.size() == 1);
  CHECK(left[0].what() == "step job/1 version 1");
  CHECK(find_step(*p.n0.store, "job", "1") == v);
}

}  // namespace ptcfs::testing
