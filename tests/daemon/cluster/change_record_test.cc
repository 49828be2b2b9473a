// The peer.prepare request of a dataset progress (daemon/cluster/change_record.h): what the
// coordinator sends decodes to the same change on the peer, with and without a re-split, and
// a dp out of range is refused there.
#include "daemon/cluster/change_record.h"
#include "daemon/cluster/changes/change_kinds.h"

#include <catch2/catch.hpp>

#include "ptc/base/json_util.h"
#include "ptc/model.h"
#include "tests/daemon/store/store_fixture.h"

using namespace ptcfs;
using nlohmann::json;

namespace {

DatasetProgressChange round_trip(const DatasetProgressChange& c) {
  PrepareRequest req;
  req.tx = "ab";
  req.change = c;
  auto back = prepare_request_from_json(to_json(req));
  INFO(back.status().to_string());
  REQUIRE(back.is_ok());
  REQUIRE(back->tx == "ab");
  const auto* got = std::get_if<DatasetProgressChange>(&back->change);
  REQUIRE(got != nullptr);
  return *got;
}

}  // namespace

TEST_CASE("a dataset progress goes to the peers with its re-split, and without one as before") {
  DatasetProgressChange plain{"j", "d", 3, 1, 8};
  auto a = round_trip(plain);
  CHECK((a.job == "j" && a.name == "d" && a.from_version == 3 && a.epoch == 1 && a.consumed == 8));
  CHECK((a.dp == 0 && a.global_batch == 0));
  PrepareRequest req;
  req.change = plain;
  CHECK_FALSE(to_json(req).contains("dp"));  // a peer of before reads it

  auto b = round_trip({"j", "d", 3, 0, 12, 3, 6});
  CHECK((b.consumed == 12 && b.dp == 3 && b.global_batch == 6 && !b.batch_offset));
  auto c = round_trip({"j", "d", 3, 0, 12, 1, 4, 8});
  CHECK((c.global_batch == 4 && c.batch_offset == 8));

  PrepareRequest with_dp;
  with_dp.tx = "ab";
  with_dp.change = DatasetProgressChange{"j", "d", 3, 0, 12, 3, 6, {}};
  json bad = to_json(with_dp);
  bad["dp"] = uint64_t{0};
  CHECK(prepare_request_from_json(bad).status().message() == "peer.prepare: dp 0 is out of range");
}

TEST_CASE("an abort carries why trying again would not help, and only when it says so") {
  FinishRequest plain{"tx1", false, {}};
  CHECK(to_json(plain) == nlohmann::json{{"op", "peer.abort"}, {"tx", "tx1"}});
  FinishRequest why{"tx2", false, "shard tp0-pp0 differs between nodes n0 and n1"};
  auto back = finish_request_from_json(to_json(why), false);
  REQUIRE(back.is_ok());
  CHECK(back->tx == "tx2");
  CHECK(back->why == why.why);
  CHECK(finish_request_from_json(to_json(plain), false)->why.empty());
  auto bad = finish_request_from_json(nlohmann::json{{"op", "peer.abort"}, {"tx", "t"}, {"why", 3}}, false);
  CHECK_FALSE(bad.is_ok());
}

TEST_CASE("a peer read asks its version to be held only for a mount's read") {
  ReadRequest pull{"n1", "j", "1", "tp0-pp0", "w", 3, 0, 8, 0, 8, false};
  CHECK_FALSE(to_json(pull).contains("hold"));
  ReadRequest mount = pull;
  mount.hold = true;
  auto back = read_request_from_json(to_json(mount));
  REQUIRE(back.is_ok());
  CHECK(back->hold);
  CHECK((back->version == 3 && back->n == 8 && back->tensor == "w"));
  CHECK_FALSE(read_request_from_json(to_json(pull))->hold);
  auto j = to_json(pull);
  j["hold"] = "yes";
  CHECK_FALSE(read_request_from_json(j).is_ok());
}

TEST_CASE("a step's state names the origin of its durable copy only when the node knows one") {
  auto ptc = ptc::parse_ptc_json(testing::kPtcJson, "ptc.json");
  REQUIRE(ptc.is_ok());
  StepState s{2, {"n0", "n1"}, {2, 2}, {"tp0-pp0"}, *ptc, {}, "o2"};
  CHECK_FALSE(to_json(s).contains("copy_origin"));
  CHECK(step_state_from_json(to_json(s), "state")->copy_origin.empty());
  s.copy_origin = "o1";  // repartitioned since its copy was written: the copy is version o1's
  auto back = step_state_from_json(to_json(s), "state");
  REQUIRE(back.is_ok());
  CHECK(back->copy_origin == "o1");
  CHECK(back->origin == "o2");
  auto j = to_json(s);
  j["copy_origin"] = 7;
  CHECK_FALSE(step_state_from_json(j, "state").is_ok());
}
