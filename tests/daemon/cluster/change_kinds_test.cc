// The kinds of cluster change (daemon/cluster/changes/change_kinds.h): every kind in the registry
// goes to the peers and decodes to the same change, with every member set; its record key and the
// datasets it may change are its own; unknown kinds and members are refused naming them.
#include "daemon/cluster/changes/change_kinds.h"

#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "daemon/cluster/membership.h"

using namespace ptcfs;
using nlohmann::json;

namespace {

ptc::Ptc small_ptc() {
  auto p = ptc::parse_ptc_json(
      R"({"parallelism": {"tp": 2, "pp": 1, "dp": 1}, "tensors": {"w": {"dtype": "F32", "shape": [4, 2], "tp_dim": 0}}})",
      "test");
  REQUIRE(p.is_ok());
  return *p;
}

// One change of each kind, every member set to something other than its default.
std::vector<AnyChange> one_of_each() {
  RepartitionChange r{"j",
                      "s",
                      3,
                      small_ptc(),
                      {"n0", "n1"},
                      {2, 2},
                      {{"n0"}, {"n1"}},
                      ptc::Parallelism{1, 1, 2},
                      {"n1", "n2"},
                      {4, 4},
                      {"n3"},
                      77,
                      64,
                      std::map<std::string, uint64_t>{{"d", 5}}};
  return {ImportChange{"/in/{node}", "j", "s", {"n0", "n1"}, {2, 2}},
          r,
          DatasetAddChange{"j", "d", json{{"home", "n0"}, {"num_samples", 4}}},
          DatasetProgressChange{"j", "d", 3, 1, 8, 2, 16, 4},
          SaveChange{"j", "s", small_ptc(), {{"n0", "n1"}, {"n1"}}},
          RemoveChange{"j", "s"}};
}

}  // namespace

TEST_CASE("every kind of change decodes to what was sent, member for member", "[changes]") {
  const auto all = one_of_each();
  REQUIRE(all.size() == std::variant_size_v<AnyChange>);
  std::set<std::string> kinds;
  for (const AnyChange& c : all) {
    INFO(kind_of(c));
    kinds.insert(kind_of(c));
    const PrepareRequest req{"tx1", c, "n0", 42};
    const json sent = to_json(req);
    CHECK(sent["kind"] == kind_of(c));
    auto back = prepare_request_from_json(sent);
    INFO(back.status().to_string());
    REQUIRE(back.is_ok());
    CHECK(back->tx == "tx1");
    CHECK(back->coordinator == "n0");
    CHECK(back->lease == 42);
    CHECK(back->change.index() == c.index());
    CHECK(to_json(*back) == sent);  // every member came back
    // A member no kind knows is refused, naming it.
    json extra = sent;
    extra["bogus"] = 1;
    CHECK_THAT(prepare_request_from_json(extra).status().message(), Catch::Contains("unknown key 'bogus'"));
  }
  CHECK(kinds.size() == all.size());  // one name per kind
}

TEST_CASE("a change's record, the datasets it may change and the step it saved are its kind's", "[changes]") {
  const auto all = one_of_each();
  const std::vector<std::string> keys = {etcd_step_key("j", "s"),    etcd_step_key("j", "s"),
                                         etcd_dataset_key("j", "d"), etcd_dataset_key("j", "d"),
                                         etcd_step_key("j", "s"),    etcd_step_key("j", "s")};
  const std::vector<std::string> datasets = {"", "j", "", "j", "", ""};
  for (size_t i = 0; i < all.size(); ++i) {
    INFO(kind_of(all[i]));
    CHECK(record_key(all[i]) == keys[i]);
    CHECK(datasets_of(all[i]) == datasets[i]);
    const bool save = std::string(kind_of(all[i])) == "save";
    CHECK(saved_step(all[i]) == (save ? std::optional<std::pair<std::string, std::string>>({"j", "s"}) : std::nullopt));
  }
}

TEST_CASE("an unknown kind or a malformed request is refused naming what is wrong", "[changes]") {
  json j = {{"op", "peer.prepare"}, {"tx", "t"}, {"kind", "rebalance"}};
  CHECK(prepare_request_from_json(j).status().message() == "peer.prepare: unknown kind 'rebalance'");
  j["kind"] = "remove";
  j["job"] = "j";
  CHECK_THAT(prepare_request_from_json(j).status().message(), Catch::Contains("step"));
  j["step"] = "s";
  CHECK(prepare_request_from_json(j).is_ok());
  j["tx"] = "";
  CHECK(prepare_request_from_json(j).status().message() == "peer.prepare has an empty 'tx'");
  j["tx"] = "t";
  j["lease"] = "7";
  CHECK(prepare_request_from_json(j).status().message() == "peer.prepare: 'lease' must be an integer");
}
