// LeaseKeeper (transport/etcd_lease.h) against a real etcd: it keeps a lease alive past its TTL,
// reports it lost once when etcd stops answering (SIGSTOP) and renewed when it answers again
// (a holder that takes a new lease, as a node does), and stops at once on a revoked lease when
// its holder says so (as the autoscaler's controller does).
#include "transport/etcd_lease.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/transport/etcd_process.h"

using namespace ptcfs;
using namespace ptcfs::testing;
using transport::EtcdClient;
using transport::LeaseKeeper;

namespace {

// Polls `done` for up to 15 s; whether it came true (no timing is asserted, only the outcome).
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 300 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return done();
}

}  // namespace

TEST_CASE("a kept lease outlives its TTL; a stopped etcd makes it lost once, and a new one renews", "[etcd]") {
  EtcdProcess etcd;
  REQUIRE(etcd.ready());
  auto client = EtcdClient::make(etcd.url(), std::chrono::milliseconds(500));
  REQUIRE(client.is_ok());
  auto lease = (*client)->grant(2);
  REQUIRE(lease.is_ok());
  REQUIRE((*client)->put("/held", "1", *lease).is_ok());
  std::atomic<int64_t> current{*lease};
  std::atomic<int> renewed{0}, lost{0}, replaced{0};
  LeaseKeeper::Hooks hooks;
  hooks.lease = [&] { return current.load(); };
  hooks.expired = [&]() -> Status {
    auto next = (*client)->grant(2);
    if (!next) return next.status();
    current = *next;
    ++replaced;
    return Status::ok();
  };
  hooks.renewed = [&] { ++renewed; };
  hooks.lost = [&](const Status&) {
    ++lost;
    return true;  // go on, as a fenced node does
  };
  LeaseKeeper keeper(**client, 2, hooks);
  // Three TTLs later the key under the first lease is still there: it was renewed.
  std::this_thread::sleep_for(std::chrono::seconds(6));
  auto held = (*client)->get("/held");
  REQUIRE(held.is_ok());
  CHECK(held->has_value());
  CHECK(renewed.load() >= 3);
  CHECK(lost.load() == 0);

  // etcd stops answering: lost, once however long it lasts.
  etcd.stop();
  REQUIRE(eventually([&] { return lost.load() == 1; }));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  CHECK(lost.load() == 1);
  // It answers again: the first lease ran out meanwhile or not; either way renewals go on.
  const int before = renewed.load();
  etcd.cont();
  REQUIRE(eventually([&] { return renewed.load() > before; }));
  CHECK(lost.load() == 1);
  keeper.stop();
}

TEST_CASE("a revoked lease is lost at the next renewal, and the keeper stops when told", "[etcd]") {
  EtcdProcess etcd;
  REQUIRE(etcd.ready());
  auto client = EtcdClient::make(etcd.url(), std::chrono::milliseconds(500));
  REQUIRE(client.is_ok());
  auto lease = (*client)->grant(3);
  REQUIRE(lease.is_ok());
  std::atomic<int> lost{0};
  Status why;
  LeaseKeeper::Hooks hooks;
  hooks.lease = [&] { return *lease; };
  hooks.lost = [&](const Status& s) {
    why = s;
    ++lost;
    return false;  // stop, as a controller that lost the lead does
  };
  LeaseKeeper keeper(**client, 3, hooks);
  REQUIRE((*client)->revoke(*lease).is_ok());
  REQUIRE(eventually([&] { return lost.load() == 1; }));
  CHECK(why.code() == Code::kNotFound);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  CHECK(lost.load() == 1);  // its thread ended: no renewal, no second report
  keeper.stop();
}
