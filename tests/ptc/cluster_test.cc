// cluster.json and the placement of ranks and shards on nodes.
#include <catch2/catch.hpp>

#include "ptc/cluster.h"

using namespace ptcfs;
using namespace ptcfs::ptc;

namespace {
ClusterConfig parse_ok(const std::string& text) {
  auto c = parse_cluster_json(text, "cluster.json");
  INFO(c.status().to_string());
  REQUIRE(c);
  return *c;
}
void expect_invalid(const std::string& text, const std::string& needle) {
  auto c = parse_cluster_json(text, "cluster.json");
  REQUIRE_FALSE(c);
  CHECK(c.status().code() == Code::kInvalidArgument);
  CHECK(c.status().message().find("cluster.json") != std::string::npos);
  CHECK(c.status().message().find(needle) != std::string::npos);
}
Layout layout_of(int tp, int pp, int dp) {
  auto ptc = parse_ptc_json(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 4,
      "tensors": {"w": {"dtype": "F32", "shape": [8, 8], "tp_dim": 0, "layer": 0}}})",
                            "ptc.json");
  REQUIRE(ptc);
  auto l = Layout::make(*ptc, Parallelism{tp, pp, dp});
  REQUIRE(l);
  return *l;
}
}  // namespace

TEST_CASE("cluster.json is parsed with defaults and validated", "[cluster]") {
  const auto c = parse_ok(R"({"nodes": [{"id": "n0", "addr": "10.0.0.1:7070", "gpus": 8},
                                        {"id": "n1", "addr": "10.0.0.2:7070"}],
                              "secret_file": "secret"})");
  REQUIRE(c.nodes.size() == 2);
  CHECK(c.nodes[0].id == "n0");
  CHECK(c.nodes[0].addr == "10.0.0.1:7070");
  CHECK(c.nodes[0].gpus == 8);
  CHECK(c.nodes[1].gpus == 1);
  CHECK(c.secret_file == "secret");
  CHECK(c.total_gpus() == 9);
  CHECK(c.find("n1") == 1);
  CHECK(c.find("n2") == -1);

  expect_invalid(R"({"nodes": []})", "non-empty list");
  expect_invalid(R"({"nodes": [{"id": "n0", "addr": "a:1"}], "extra": 1})", "unknown key 'extra'");
  expect_invalid(R"({"nodes": [{"id": "n0", "addr": "a:1", "cpus": 2}]})", "unknown key 'cpus'");
  expect_invalid(R"({"nodes": [{"id": "n0"}]})", "'id' and 'addr' are required");
  expect_invalid(R"({"nodes": [{"id": "../n0", "addr": "a:1"}]})", "node name");
  expect_invalid(R"({"nodes": [{"id": "n0", "addr": "nohost"}]})", "not HOST:PORT");
  expect_invalid(R"({"nodes": [{"id": "n0", "addr": "a:1", "gpus": 0}]})", "gpus");
  expect_invalid(R"({"nodes": [{"id": "n0", "addr": "a:1"}, {"id": "n0", "addr": "a:2"}]})", "appears twice");
  expect_invalid(R"({"nodes": [{"id": "n0", "addr": "a:1"}, {"id": "n1", "addr": "a:1"}]})", "appears twice");
  expect_invalid(R"({"nodes": [{"id": "n0", "addr": "a:1"}], "secret_file": ""})", "secret_file is empty");
}

TEST_CASE("ranks fill nodes in order, gpus at a time", "[cluster]") {
  const auto c = parse_ok(R"({"nodes": [{"id": "a", "addr": "h:1", "gpus": 2}, {"id": "b", "addr": "h:2", "gpus": 3},
                                        {"id": "c", "addr": "h:3", "gpus": 4}]})");
  auto r = place_ranks(Parallelism{2, 2, 1}, c);
  REQUIRE(r);
  CHECK(*r == std::vector<int>{0, 0, 1, 1});
  r = place_ranks(Parallelism{3, 1, 3}, c);
  REQUIRE(r);
  CHECK(*r == std::vector<int>{0, 0, 1, 1, 1, 2, 2, 2, 2});
  auto too_many = place_ranks(Parallelism{2, 5, 1}, c);
  REQUIRE_FALSE(too_many);
  CHECK(too_many.status().message().find("needs 10 GPUs but the cluster has 9") != std::string::npos);
}

TEST_CASE("shards are held by the nodes of their ranks, DP replicas on several", "[cluster]") {
  // tp=2, pp=2, dp=2 on two nodes of 4 GPUs: rank = t + 2*(d + 2*p), so stage 0 (ranks 0-3) is
  // on node 0 and stage 1 (ranks 4-7) on node 1; each shard has its two DP replicas on one node.
  const auto two =
      parse_ok(R"({"nodes": [{"id": "a", "addr": "h:1", "gpus": 4}, {"id": "b", "addr": "h:2", "gpus": 4}]})");
  auto s = shard_nodes(layout_of(2, 2, 2), two);
  REQUIRE(s);
  CHECK(*s == std::vector<std::vector<int>>{{0}, {0}, {1}, {1}});  // tp0-pp0, tp1-pp0, tp0-pp1, tp1-pp1
  // Four nodes of 2 GPUs: the DP replicas of each shard land on two different nodes.
  const auto four = parse_ok(R"({"nodes": [{"id": "a", "addr": "h:1", "gpus": 2}, {"id": "b", "addr": "h:2", "gpus": 2},
                                           {"id": "c", "addr": "h:3", "gpus": 2}, {"id": "d", "addr": "h:4", "gpus": 2}]})");
  s = shard_nodes(layout_of(2, 2, 2), four);
  REQUIRE(s);
  CHECK(*s == std::vector<std::vector<int>>{{0, 1}, {0, 1}, {2, 3}, {2, 3}});
  // tp=4 on 2-GPU nodes: a TP group spans two nodes.
  s = shard_nodes(layout_of(4, 1, 1), four);
  REQUIRE(s);
  CHECK(*s == std::vector<std::vector<int>>{{0}, {0}, {1}, {1}});
}

TEST_CASE("a placement pinned with its GPU counts ignores the cluster's counts of now", "[cluster]") {
  // Node a now has 4 GPUs; the placement was made when it had 2: stage 1 stays on b.
  const auto c =
      parse_ok(R"({"nodes": [{"id": "a", "addr": "h:1", "gpus": 4}, {"id": "b", "addr": "h:2", "gpus": 2}]})");
  auto now = shard_nodes_on(layout_of(2, 2, 1), c, {"a", "b"});
  REQUIRE(now);
  CHECK(*now == std::vector<std::vector<int>>{{0}, {0}, {0}, {0}});
  auto pinned = shard_nodes_on(layout_of(2, 2, 1), c, {"a", "b"}, {2, 2});
  REQUIRE(pinned);
  CHECK(*pinned == std::vector<std::vector<int>>{{0}, {0}, {1}, {1}});
  CHECK(gpus_of(c, {"b", "a", "x"}) == std::vector<int>{2, 4, 0});
  auto short_list = shard_nodes_on(layout_of(2, 2, 1), c, {"a", "b"}, {2});
  REQUIRE_FALSE(short_list);
  CHECK(short_list.status().message() == "a placement of 2 nodes with 1 GPU counts");
  auto zero = shard_nodes_on(layout_of(2, 2, 1), c, {"a", "b"}, {0, 2});
  REQUIRE_FALSE(zero);
  CHECK(zero.status().message() == "node 'a' is placed with 0 GPUs");
  auto too_few = shard_nodes_on(layout_of(2, 2, 1), c, {"a", "b"}, {1, 1});
  REQUIRE_FALSE(too_few);
  CHECK(too_few.status().message().find("needs 4 GPUs but the cluster has 2") != std::string::npos);
}
