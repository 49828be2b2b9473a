// The etcd client against a real etcd process: leases, get/put/range, transactions that hold
// or not, a watch that streams every change in order, and the errors of a dead endpoint.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <thread>

#include "tests/transport/etcd_process.h"
#include "transport/etcd_client.h"

using namespace ptcfs;
using namespace ptcfs::transport;
using ptcfs::testing::EtcdProcess;

namespace {

std::unique_ptr<EtcdClient> client_of(const std::string& urls) {
  auto c = EtcdClient::make(urls, std::chrono::milliseconds(1000));
  REQUIRE(c);
  return std::move(c).value();
}

}  // namespace

TEST_CASE("etcd endpoints are checked") {
  CHECK(EtcdClient::make("http://127.0.0.1:2379,http://localhost:1"));
  CHECK(EtcdClient::make("https://127.0.0.1:2379,https://localhost:1"));  // the system's CAs
  auto bad = EtcdClient::make("ftp://127.0.0.1:2379");
  REQUIRE_FALSE(bad);
  CHECK(bad.status().message() == "etcd endpoint 'ftp://127.0.0.1:2379' must be http://HOST:PORT or https://HOST:PORT");
  auto mixed = EtcdClient::make("https://127.0.0.1:2379,http://127.0.0.1:2380");
  REQUIRE_FALSE(mixed);
  CHECK(mixed.status().message() ==
        "etcd endpoints 'https://127.0.0.1:2379,http://127.0.0.1:2380' mix http:// and https://");
  // Certificates for a plain endpoint would be ignored, and the records sent in clear.
  auto clear = EtcdClient::make("http://127.0.0.1:2379", std::chrono::seconds(1), EtcdTls{"ca.crt", "", ""});
  REQUIRE_FALSE(clear);
  CHECK(clear.status().code() == Code::kInvalidArgument);
  CHECK_FALSE(EtcdClient::make("http://127.0.0.1:port"));
  CHECK_FALSE(EtcdClient::make(""));
}

TEST_CASE("etcd: put, get, range, transactions and leases on a real etcd") {
  EtcdProcess etcd;
  REQUIRE(etcd.ready());
  auto c = client_of(etcd.url());

  // Keys and values are any bytes.
  const std::string binary("v\0\xff\x01 end", 8);
  REQUIRE(c->put("/t/a", binary));
  REQUIRE(c->put("/t/b", "2"));
  REQUIRE(c->put("/u/c", "3"));
  auto a = c->get("/t/a");
  REQUIRE(a);
  REQUIRE(a->has_value());
  CHECK((*a)->value == binary);
  CHECK((*a)->version == 1);
  auto none = c->get("/t/none");
  REQUIRE(none);
  CHECK_FALSE(none->has_value());

  auto r = c->range_prefix("/t/");
  REQUIRE(r);
  REQUIRE(r->kvs.size() == 2);
  CHECK(r->kvs[0].key == "/t/a");
  CHECK(r->kvs[1].key == "/t/b");
  CHECK(r->revision >= r->kvs[1].mod_revision);

  // A transaction applies only when its compares hold.
  const int64_t rev_b = r->kvs[1].mod_revision;
  auto won = c->txn({EtcdCompare::mod_is("/t/b", rev_b), EtcdCompare::mod_is("/t/new", 0)},
                    {EtcdWrite::put("/t/b", "22"), EtcdWrite::put("/t/new", "n"), EtcdWrite::erase("/t/a")});
  REQUIRE(won);
  CHECK(*won);
  auto lost = c->txn({EtcdCompare::mod_is("/t/b", rev_b)}, {EtcdWrite::put("/t/b", "lost")});
  REQUIRE(lost);
  CHECK_FALSE(*lost);
  CHECK((*c->get("/t/b"))->value == "22");
  CHECK_FALSE(c->get("/t/a")->has_value());
  CHECK((*c->txn({EtcdCompare::value_is("/t/new", "n")}, {EtcdWrite::put("/t/v", "ok")})));
  CHECK((*c->get("/t/v"))->value == "ok");

  // A key under a lease goes with it; LEASE compares hold while the lease lives.
  auto lease = c->grant(30);
  REQUIRE(lease);
  REQUIRE(c->put("/t/leased", "x", *lease));
  CHECK((*c->get("/t/leased"))->lease == *lease);
  auto ttl = c->keep_alive(*lease);
  REQUIRE(ttl);
  CHECK(*ttl == 30);
  CHECK(*c->txn({EtcdCompare::lease_is("/t/leased", *lease)}, {EtcdWrite::put("/t/held", "1")}));
  REQUIRE(c->revoke(*lease));
  CHECK_FALSE(c->get("/t/leased")->has_value());
  auto gone = c->keep_alive(*lease);
  REQUIRE_FALSE(gone);
  CHECK(gone.status().code() == Code::kNotFound);
  CHECK_FALSE(*c->txn({EtcdCompare::lease_is("/t/leased", *lease)}, {EtcdWrite::put("/t/held", "2")}));
  CHECK((*c->get("/t/held"))->value == "1");
}

TEST_CASE("etcd: a watch streams every change of its prefix in order, from a revision") {
  EtcdProcess etcd;
  REQUIRE(etcd.ready());
  auto c = client_of(etcd.url());
  REQUIRE(c->put("/w/before", "0"));
  auto start = c->range_prefix("/w/");
  REQUIRE(start);

  std::mutex mu;
  std::vector<EtcdEvent> seen;
  std::atomic<bool> stop{false};
  Status watch_end;
  std::thread watcher([&] {
    watch_end = c->watch_prefix(
        "/w/", start->revision + 1,
        [&](const EtcdEvent& e) {
          std::lock_guard lock(mu);
          seen.push_back(e);
        },
        [&] { return stop.load(); });
  });
  REQUIRE(c->put("/w/1", "one"));
  REQUIRE(c->put("/other", "not watched"));
  REQUIRE(c->put("/w/2", "two"));
  REQUIRE(c->txn({}, {EtcdWrite::erase("/w/1")}));
  for (int i = 0; i < 100; ++i) {
    {
      std::lock_guard lock(mu);
      if (seen.size() >= 3) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  watcher.join();
  CHECK(watch_end.is_ok());
  std::lock_guard lock(mu);
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].kv.key == "/w/1");
  CHECK(seen[0].kv.value == "one");
  CHECK_FALSE(seen[0].deleted);
  CHECK(seen[1].kv.key == "/w/2");
  CHECK(seen[2].kv.key == "/w/1");
  CHECK(seen[2].deleted);
  CHECK(seen[0].kv.mod_revision < seen[1].kv.mod_revision);
}

TEST_CASE("etcd: a dead endpoint fails over to the next; none answering is kUnavailable") {
  EtcdProcess etcd;
  REQUIRE(etcd.ready());
  auto both = client_of("http://127.0.0.1:1," + etcd.url());
  REQUIRE(both->put("/f", "1"));
  CHECK((*both->get("/f"))->value == "1");

  auto dead = client_of("http://127.0.0.1:1");
  auto r = dead->get("/f");
  REQUIRE_FALSE(r);
  CHECK(r.status().code() == Code::kUnavailable);
  CHECK(r.status().message().find("127.0.0.1:1") != std::string::npos);

  // A stopped etcd accepts connections but does not answer: the deadline ends the call.
  etcd.stop();
  auto silent = client_of(etcd.url());
  auto s = silent->get("/f");
  etcd.cont();
  REQUIRE_FALSE(s);
  CHECK(s.status().code() == Code::kDeadlineExceeded);
}
