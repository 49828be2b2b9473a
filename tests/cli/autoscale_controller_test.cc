// The autoscaler's controller (cli/autoscale/controller.h) against a real etcd, with the real
// throughput policy, and the daemons it repartitions through answered by a function that records
// each request (the daemons themselves are tested in tests/integration/test_autoscale.py): one
// pass writes the decision the policy makes, for the latest committed step, fenced by the
// leader's lease; a controller finds another leading and does nothing; a controller whose lead
// is taken during its pass writes nothing.
#include "cli/autoscale/controller.h"

#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "tests/transport/etcd_process.h"

using namespace ptcfs;
using namespace ptcfs::cli;
using namespace ptcfs::testing;
using nlohmann::json;
using transport::EtcdClient;

namespace {

const std::string kP = "/as";
// Job "a": 1 to 4 GPUs, measured samples/s; its checkpoint is job "ja" at daemon "d0".
const std::string kEntry = R"({"job": {"min_gpus": 1, "max_gpus": 4, "batch": {"min": 4, "max": 16},
  "throughput": {"1": {"4": 50}, "2": {"4": 90, "8": 110}, "4": {"8": 200, "16": 260}}},
  "daemon": "d0", "store_job": "ja"})";

std::unique_ptr<EtcdClient> client(const EtcdProcess& etcd) {
  auto c = EtcdClient::make(etcd.url(), std::chrono::milliseconds(1000));
  REQUIRE(c.is_ok());
  return std::move(c).value();
}

// The daemon side: `ls` lists steps 100, 200 and 300, 300 still pending; `repartition` succeeds.
struct Daemons {
  std::mutex mu;
  std::vector<json> asked;  // (daemon, request) in order
  std::function<void(const json&)> on_repartition;
  Controller::Call call() {
    return [this](const std::string& daemon, const json& req) -> Result<json> {
      {
        std::lock_guard lock(mu);
        asked.push_back({{"daemon", daemon}, {"req", req}});
      }
      if (req["op"] == "ls") return json{{"job", "ja"}, {"steps", {"100", "200", "300"}}, {"pending", {"300"}}};
      if (req["op"] == "repartition") {
        if (on_repartition) on_repartition(req);
        return json{{"unchanged", false}};
      }
      return invalid("unexpected op");
    };
  }
};

Controller make(const EtcdProcess& etcd, Daemons& d, const std::string& id) {
  ControllerOptions o;
  o.prefix = kP;
  o.id = id;
  o.gpus = 4;
  o.lease_ttl_s = 3;
  auto decide = [](const std::vector<planner::QueueEntry>& q, int gpus,
                   const std::map<std::string, planner::Decision>& s) {
    return planner::decide_throughput(q, gpus, s);
  };
  return Controller(o, client(etcd), decide, d.call());
}

// What the policy decides for the queue {a} on 4 GPUs: the oracle the written decision must equal.
planner::Decision expected() {
  auto e = planner::parse_queue_entry(kEntry, "a", "queue/a");
  REQUIRE(e.is_ok());
  auto d = planner::decide_throughput({*e}, 4);
  REQUIRE(d.is_ok());
  REQUIRE(d->size() == 1);
  return d->front();
}

}  // namespace

TEST_CASE("one pass repartitions the latest committed step and writes the policy's decision", "[autoscale]") {
  EtcdProcess etcd;
  REQUIRE(etcd.ready());
  auto admin = client(etcd);
  REQUIRE(admin->put(kP + "/queue/a", kEntry).is_ok());
  Daemons d;
  Controller c = make(etcd, d, "c1");
  auto done = c.once();
  INFO(done.status().to_string());
  REQUIRE(done.is_ok());
  CHECK(*done);

  const planner::Decision want = expected();
  REQUIRE_FALSE(want.queued);
  auto stored = admin->get(kP + "/decision/a");
  REQUIRE(stored.is_ok());
  REQUIRE(stored->has_value());
  auto sd = planner::parse_stored_decision((*stored)->value, "a", "decision/a");
  REQUIRE(sd.is_ok());
  CHECK(sd->decision == want);
  CHECK(sd->step == "200");  // 300 is still being saved
  CHECK(sd->seq == 1);
  CHECK(sd->controller == "c1");
  auto seq = admin->get(kP + "/seq");
  REQUIRE(seq.is_ok());
  REQUIRE(seq->has_value());
  CHECK((*seq)->value == "1");

  REQUIRE(d.asked.size() == 2);
  CHECK(d.asked[0] == json{{"daemon", "d0"}, {"req", {{"op", "ls"}, {"path", "ja"}}}});
  const std::string to =
      "tp=" + std::to_string(want.tp) + ",pp=" + std::to_string(want.pp) + ",dp=" + std::to_string(want.dp);
  CHECK(d.asked[1]["req"] ==
        json{{"op", "repartition"}, {"job", "ja"}, {"step", "200"}, {"to", to}, {"dry_run", false}});
  // The lead is given up at the end of --once.
  auto leader = admin->get(kP + "/leader");
  REQUIRE(leader.is_ok());
  CHECK_FALSE(leader->has_value());

  // A second pass finds nothing to change and asks no daemon.
  Controller again = make(etcd, d, "c2");
  auto second = again.once();
  REQUIRE(second.is_ok());
  CHECK(*second);
  CHECK(d.asked.size() == 2);
}

TEST_CASE("a controller finds another leading and does nothing", "[autoscale]") {
  EtcdProcess etcd;
  REQUIRE(etcd.ready());
  auto admin = client(etcd);
  REQUIRE(admin->put(kP + "/queue/a", kEntry).is_ok());
  auto lease = admin->grant(30);
  REQUIRE(lease.is_ok());
  REQUIRE(admin->put(kP + "/leader", R"({"id": "other"})", *lease).is_ok());
  Daemons d;
  Controller c = make(etcd, d, "c1");
  auto done = c.once();
  REQUIRE_FALSE(done.is_ok());
  CHECK(done.status().code() == Code::kUnavailable);
  CHECK(done.status().message() == R"({"id": "other"} holds /as/leader; nothing done)");
  CHECK(d.asked.empty());
  auto stored = admin->get(kP + "/decision/a");
  REQUIRE(stored.is_ok());
  CHECK_FALSE(stored->has_value());
}

TEST_CASE("a controller whose lead is taken during its pass writes no decision", "[autoscale]") {
  EtcdProcess etcd;
  REQUIRE(etcd.ready());
  auto admin = client(etcd);
  REQUIRE(admin->put(kP + "/queue/a", kEntry).is_ok());
  Daemons d;
  // While the repartition runs, another controller takes the lead (the old lease's key replaced).
  auto other = admin->grant(30);
  REQUIRE(other.is_ok());
  d.on_repartition = [&](const json&) { REQUIRE(admin->put(kP + "/leader", R"({"id": "c2"})", *other).is_ok()); };
  Controller c = make(etcd, d, "c1");
  auto done = c.once();
  REQUIRE_FALSE(done.is_ok());
  CHECK(done.status().code() == Code::kUnavailable);
  CHECK_THAT(done.status().message(), Catch::Contains("c1 lost the lead of /as/leader during its pass"));
  auto stored = admin->get(kP + "/decision/a");
  REQUIRE(stored.is_ok());
  CHECK_FALSE(stored->has_value());
  auto leader = admin->get(kP + "/leader");
  REQUIRE(leader.is_ok());
  REQUIRE(leader->has_value());
  CHECK((*leader)->value == R"({"id": "c2"})");
}
