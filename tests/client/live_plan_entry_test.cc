// ptcfs_live_plan (client/ptcfs_client.h), called through the shared library's C entry:
// exact moves for hand-worked changes, and totals equal to the cluster plan's bytes_min.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "ptc/cluster.h"
#include "ptc/cluster_plan.h"
#include "client/ptcfs_client.h"

namespace {

// "a" F32 [4, 2] split along rows (8 bytes a row), "b" F32 [3] replicated (12 bytes).
const char* kTwoTensors =
    R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 0, "tensors": )"
    R"({"a": {"dtype": "F32", "shape": [4, 2], "tp_dim": 0}, "b": {"dtype": "F32", "shape": [3]}}})";

nlohmann::json live_plan(const char* ptc, const char* from, const char* to) {
  char err[512] = "";
  char* text = ptcfs_live_plan(ptc, from, to, err, sizeof err);
  INFO(err);
  REQUIRE(text != nullptr);
  auto j = nlohmann::json::parse(text);
  ptcfs_free(text);
  return j;
}

// (tensor, src_rank, dst_rank, src start along the slab dim, dst start, length, bytes)
using Move = std::tuple<std::string, int, int, int64_t, int64_t, int64_t, uint64_t>;

std::vector<Move> moves(const nlohmann::json& plan) {
  std::vector<Move> out;
  for (const auto& m : plan["moves"]) {
    const auto& s = m["src"];
    const auto& d = m["dst"];
    // Every tensor here is a slab along dimension 0.
    CHECK(s["shape"].size() == d["shape"].size());
    out.emplace_back(m["tensor"], m["src_rank"], m["dst_rank"], s["start"][0], d["start"][0], d["shape"][0],
                     m["bytes"]);
  }
  return out;
}

// (min, sent, received) per rank
using Bytes = std::tuple<uint64_t, uint64_t, uint64_t>;
std::vector<Bytes> rank_bytes(const nlohmann::json& plan) {
  std::vector<Bytes> out;
  for (const auto& r : plan["ranks"]) out.emplace_back(r["min"], r["sent"], r["received"]);
  return out;
}

// The cluster plan's min_transfer_bytes for one node per rank, computed apart from the entry.
uint64_t cluster_min(const char* ptc_json, ptcfs::ptc::Parallelism from, ptcfs::ptc::Parallelism to) {
  auto p = ptcfs::ptc::parse_ptc_json(ptc_json, "ptc.json");
  REQUIRE(p.is_ok());
  auto lf = ptcfs::ptc::Layout::make(*p, from);
  auto lt = ptcfs::ptc::Layout::make(*p, to);
  REQUIRE((lf.is_ok() && lt.is_ok()));
  ptcfs::ptc::ClusterConfig c;
  const int world = std::max(from.world(), to.world());
  for (int r = 0; r < world; ++r) c.nodes.push_back({"n" + std::to_string(r), "a:" + std::to_string(r), 1});
  ptcfs::ptc::ClusterHoldings h;
  h.num_nodes = world;
  h.src_nodes = *ptcfs::ptc::shard_nodes(*lf, c);
  h.dst_nodes = *ptcfs::ptc::shard_nodes(*lt, c);
  return ptcfs::ptc::min_transfer_bytes(*lf, *lt, h);
}

}  // namespace

TEST_CASE("tp2 -> tp1: rank 0 keeps its rows and b, and receives the other half of a from rank 1", "[live_plan]") {
  const auto plan = live_plan(kTwoTensors, "tp=2,pp=1,dp=1", "tp=1,pp=1,dp=1");
  CHECK(moves(plan) == std::vector<Move>{
                           {"a", 0, 0, 0, 0, 2, 16},
                           {"a", 1, 0, 0, 2, 2, 16},
                           {"b", 0, 0, 0, 0, 3, 12},
                       });
  CHECK(rank_bytes(plan) == std::vector<Bytes>{{16, 0, 16}, {0, 16, 0}});
  CHECK(plan["bytes_min"] == 16);
  CHECK(plan["bytes_min"] == cluster_min(kTwoTensors, {2, 1, 1}, {1, 1, 1}));
  CHECK(plan["ranks"][0]["old_shard"] == "tp0-pp0");
  CHECK(plan["ranks"][1]["old_shard"] == "tp1-pp0");
  CHECK(plan["ranks"][1]["new_shard"] == nullptr);
  CHECK(plan["ranks"][0]["new_shapes"] == nlohmann::json::parse(R"({"a": [4, 2], "b": [3]})"));
  CHECK(plan["moves"][1]["src"] == nlohmann::json::parse(R"({"start": [0, 0], "shape": [2, 2]})"));
  CHECK(plan["moves"][1]["dst"] == nlohmann::json::parse(R"({"start": [2, 0], "shape": [2, 2]})"));
}

TEST_CASE("dp2 -> tp2: each replica already holds its new rows, so nothing crosses", "[live_plan]") {
  const auto plan = live_plan(kTwoTensors, "tp=1,pp=1,dp=2", "tp=2,pp=1,dp=1");
  CHECK(moves(plan) == std::vector<Move>{
                           {"a", 0, 0, 0, 0, 2, 16},
                           {"b", 0, 0, 0, 0, 3, 12},
                           {"a", 1, 1, 2, 0, 2, 16},
                           {"b", 1, 1, 0, 0, 3, 12},
                       });
  CHECK(rank_bytes(plan) == std::vector<Bytes>{{0, 0, 0}, {0, 0, 0}});
  CHECK(plan["bytes_min"] == 0);
}

TEST_CASE("dp2 -> dp4: the two new replicas take their bytes from both old ones, least loaded first", "[live_plan]") {
  const auto plan = live_plan(kTwoTensors, "tp=1,pp=1,dp=2", "tp=1,pp=1,dp=4");
  // Rank 2: a from rank 0 (a tie, to the lower rank), b from rank 1 (12 < 32 bytes so far);
  // rank 3: a from rank 1 (12 < 32), b from rank 0 (32 < 44).
  CHECK(moves(plan) == std::vector<Move>{
                           {"a", 0, 0, 0, 0, 4, 32},
                           {"b", 0, 0, 0, 0, 3, 12},
                           {"a", 1, 1, 0, 0, 4, 32},
                           {"b", 1, 1, 0, 0, 3, 12},
                           {"a", 0, 2, 0, 0, 4, 32},
                           {"b", 1, 2, 0, 0, 3, 12},
                           {"a", 1, 3, 0, 0, 4, 32},
                           {"b", 0, 3, 0, 0, 3, 12},
                       });
  CHECK(rank_bytes(plan) == std::vector<Bytes>{{0, 44, 0}, {0, 44, 0}, {44, 0, 44}, {44, 0, 44}});
  CHECK(plan["bytes_min"] == 88);
  CHECK(plan["bytes_min"] == cluster_min(kTwoTensors, {1, 1, 2}, {1, 1, 4}));
}

TEST_CASE("a config that does not fit the PTC is an invalid_argument naming the config", "[live_plan]") {
  char err[512] = "";
  CHECK(ptcfs_live_plan(kTwoTensors, "tp=3,pp=1,dp=1", "tp=1,pp=1,dp=1", err, sizeof err) == nullptr);
  CHECK(std::string(err).starts_with("invalid_argument: live plan from tp=3,pp=1,dp=1"));
  CHECK(ptcfs_live_plan("{", "tp=1,pp=1,dp=1", "tp=1,pp=1,dp=1", err, sizeof err) == nullptr);
  CHECK(std::string(err).starts_with("invalid_argument"));
}
