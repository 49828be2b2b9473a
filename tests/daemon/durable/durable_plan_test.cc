// The durable copy's pure parts (daemon/durable/durable_plan.h): who writes which rank file and
// who commits, the part records as JSON, and what a commit still waits for.
#include "daemon/durable/durable_plan.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "ptc/model.h"

using namespace ptcfs;
using namespace ptcfs::durable;

namespace {

ptc::Layout layout(int tp, int pp) {
  auto p = ptc::parse_ptc_json(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 2, "tensors": {
    "a": {"dtype": "F32", "shape": [4, 4], "tp_dim": 0, "layer": 0},
    "b": {"dtype": "F32", "shape": [4, 4], "tp_dim": 1, "layer": 1}}})",
                               "ptc.json");
  REQUIRE(p.is_ok());
  auto l = ptc::Layout::make(*p, ptc::Parallelism{tp, pp, 1});
  REQUIRE(l.is_ok());
  return *l;
}

}  // namespace

TEST_CASE("the first holder of each shard writes its file; the first shard's writer commits", "[durable]") {
  const auto l = layout(2, 2);  // tp0-pp0, tp1-pp0, tp0-pp1, tp1-pp1 in shards() order
  std::vector<std::string> names;
  for (const auto& s : l.shards()) names.push_back(rank_file(s));
  REQUIRE(names.size() == 4);
  const std::vector<std::vector<std::string>> holders{{"n1", "n0"}, {"n0"}, {"n2", "n1"}, {}};
  auto n0 = plan_upload(l, holders, "n0");
  auto n1 = plan_upload(l, holders, "n1");
  auto n2 = plan_upload(l, holders, "n2");
  CHECK(n0.shards == std::vector<ptc::ShardId>{l.shards()[1]});
  CHECK(!n0.commits);
  CHECK(n1.shards == std::vector<ptc::ShardId>{l.shards()[0]});
  CHECK(n1.commits);
  CHECK(n2.shards == std::vector<ptc::ShardId>{l.shards()[2]});
  CHECK(!n2.commits);
  // One node holding everything writes everything.
  auto one = plan_upload(l, std::vector<std::vector<std::string>>(4, {""}), "");
  CHECK(one.shards == l.shards());
  CHECK(one.commits);
  CHECK(step_prefix("job", "100") == "job/100/");
}

TEST_CASE("a commit waits for a part record of every file, cut from its version", "[durable]") {
  const auto l = layout(2, 1);
  std::vector<FilePart> parts{{"tp0-pp0.safetensors", 10, 1, 3, 0, "tx-a"},
                              {"tp1-pp0.safetensors", 10, 2, 2, 0, "tx-a"}};
  const VersionId v3{3, "tx-a", 1000};
  CHECK(missing_parts(l, v3, parts) == std::vector<std::string>{"tp1-pp0.safetensors"});
  parts[1].version = 3;
  CHECK(missing_parts(l, v3, parts).empty());
  CHECK(missing_parts(l, VersionId{4, "tx-a", 1000}, parts).size() == 2);
}

TEST_CASE("records of another step once saved under the name are told apart by origin, not by time", "[durable]") {
  // Removed and saved again within the same second: the same version number, the same time.
  const FilePart old_step{"tp0-pp0.safetensors", 10, 1, 1, 1000, "tx-old"};
  const FilePart new_step{"tp0-pp0.safetensors", 10, 2, 1, 1000, "tx-new"};
  CHECK(!of_version(old_step, VersionId{1, "tx-new", 1000}));
  CHECK(of_version(new_step, VersionId{1, "tx-new", 1000}));
  // A record's writer whose clock runs behind counts: its time is not looked at.
  CHECK(of_version(FilePart{"a", 1, 1, 1, 10, "tx-new"}, VersionId{1, "tx-new", 1000}));
  // An origin unknown on either side (a version or a record of an older ptcfsd): records written
  // before the version's commit (a second's slack) are another step's.
  CHECK(of_version(FilePart{"a", 1, 1, 1, 999}, VersionId{1, "", 1000}));
  CHECK(!of_version(FilePart{"a", 1, 1, 1, 998}, VersionId{1, "", 1000}));
  CHECK(of_version(FilePart{"a", 1, 1, 1, 2000, "tx-new"}, VersionId{1, "", 1000}));
  CHECK(!of_version(FilePart{"a", 1, 1, 1, 998, "tx-new"}, VersionId{1, "", 1000}));
  CHECK(of_version(FilePart{"a", 1, 1, 1, 1000}, VersionId{1, "tx-new", 1000}));
  CHECK(!of_version(FilePart{"a", 1, 1, 2, 1000, "tx-new"}, VersionId{1, "tx-new", 1000}));
  CHECK(same_origin("tx-a", "tx-a"));
  CHECK(same_origin("", "tx-a"));
  CHECK(same_origin("tx-a", ""));
  CHECK(!same_origin("tx-a", "tx-b"));
}

TEST_CASE("part records read back as written, with the version they were cut from", "[durable]") {
  const FilePart p{"tp0-pp0.safetensors", 1, 0xfedcba9876543210ull, 3, 1700000000, "0123abcd"};
  const auto j = to_json(p);
  CHECK(j["xxh3"] == "fedcba9876543210");
  CHECK(j["origin"] == "0123abcd");
  auto back = part_from_json(nlohmann::json::parse(j.dump()), "rec");
  REQUIRE(back.is_ok());
  CHECK(*back == p);
  auto unversioned =
      part_from_json(nlohmann::json::parse(R"({"name": "a", "size": 1, "xxh3": "0000000000000001"})"), "rec");
  REQUIRE(!unversioned.is_ok());
  CHECK(unversioned.status().message().find("rec") != std::string::npos);
}
