// The pure half of a node's part of a cluster repartition (daemon/cluster/repartition_part.h): the node
// table every node plans over, the holdings, and the digest nodes compare plans by.
#include <catch2/catch.hpp>

#include "daemon/cluster/repartition_part.h"
#include "ptc/layout.h"
#include "ptc/plan.h"

namespace ptcfs {
namespace {

const char* kPtc = R"({"parallelism": {"tp": 2, "pp": 1, "dp": 1}, "num_layers": 1, "tensors": {
  "w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "layer": 0}}})";

ptc::Layout layout(int tp) {
  auto p = ptc::parse_ptc_json(kPtc, "ptc.json");
  REQUIRE(p.is_ok());
  auto l = ptc::Layout::make(*p, ptc::Parallelism{tp, 1, 1});
  REQUIRE(l.is_ok());
  return *l;
}

ptc::ClusterConfig known(std::vector<std::string> ids) {
  ptc::ClusterConfig c;
  for (const auto& id : ids) c.nodes.push_back({id, id + ":7070", 1});
  return c;
}

RepartitionChange change(std::vector<std::string> from, std::vector<std::string> to) {
  RepartitionChange c;
  c.job = "j";
  c.step = "1";
  c.from_nodes = std::move(from);
  c.to_nodes = std::move(to);
  c.to = ptc::Parallelism{2, 1, 1};
  return c;
}

std::vector<std::string> ids(const ptc::ClusterConfig& c) {
  std::vector<std::string> out;
  for (const auto& n : c.nodes) out.push_back(n.id);
  return out;
}

}  // namespace

TEST_CASE("every node plans over the same table: the change's nodes sorted by id", "[repartition_part]") {
  const RepartitionChange c = change({"n2", "n0"}, {"n1", "n2"});
  // Two nodes that learnt of the others in different orders.
  auto a = change_table(c, known({"n0", "n1", "n2", "n3"}));
  auto b = change_table(c, known({"n3", "n2", "n1", "n0"}));
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  CHECK(ids(*a) == std::vector<std::string>{"n0", "n1", "n2"});  // n3 takes no part
  CHECK(ids(*b) == ids(*a));
}

TEST_CASE("a change naming a node this one does not know is refused, naming it", "[repartition_part]") {
  auto t = change_table(change({"n0"}, {"n0", "n9"}), known({"n0", "n1"}));
  REQUIRE_FALSE(t.is_ok());
  CHECK(t.status().to_string() == "not_found: node n9 of the change of j/1 is unknown here");
}

TEST_CASE("holdings: old shards on the old placement, new on the new, down nodes are no source", "[repartition_part]") {
  const RepartitionChange up = change({"n0", "n1"}, {"n1", "n0"});
  const ptc::ClusterConfig table = known({"n0", "n1"});
  auto h = cluster_holdings(layout(2), layout(2), up, table);
  REQUIRE(h.is_ok());
  CHECK(h->num_nodes == 2);
  CHECK(h->src_nodes == std::vector<std::vector<int>>{{0}, {1}});
  CHECK(h->dst_nodes == std::vector<std::vector<int>>{{1}, {0}});

  RepartitionChange down = up;
  down.down = {"n1"};
  auto d = cluster_holdings(layout(2), layout(2), down, table);
  REQUIRE(d.is_ok());
  CHECK(d->src_nodes == std::vector<std::vector<int>>{{0}, {}});
  CHECK(d->dst_nodes == h->dst_nodes);
}

TEST_CASE("holdings of a saved step follow its holders, which must match the layout", "[repartition_part]") {
  RepartitionChange c = change({}, {"n0", "n1"});
  c.from_holders = {{"n1"}, {"n0", "n1"}};
  auto h = cluster_holdings(layout(2), layout(2), c, known({"n0", "n1"}));
  REQUIRE(h.is_ok());
  CHECK(h->src_nodes == std::vector<std::vector<int>>{{1}, {0, 1}});
  c.from_holders = {{"n1"}};
  auto bad = cluster_holdings(layout(2), layout(2), c, known({"n0", "n1"}));
  CHECK(bad.status().to_string() == "invalid_argument: the holders do not match the layout");
}

TEST_CASE("the plan digest is the same for the same plan and differs when a copy moves", "[repartition_part]") {
  const RepartitionChange c = change({"n0", "n1"}, {"n1", "n0"});
  const ptc::ClusterConfig table = known({"n0", "n1"});
  auto h = cluster_holdings(layout(2), layout(2), c, table);
  REQUIRE(h.is_ok());
  auto p1 = ptc::make_cluster_plan(layout(2), layout(2), *h);
  auto p2 = ptc::make_cluster_plan(layout(2), layout(2), *h);
  REQUIRE(p1.is_ok());
  REQUIRE(p2.is_ok());
  REQUIRE_FALSE(p1->copies.empty());
  CHECK(plan_digest(*p1) == plan_digest(*p2));
  ptc::Plan moved = *p1;
  moved.copies.front().dst_lo += 1;
  CHECK(plan_digest(moved) != plan_digest(*p1));
  REQUIRE_FALSE(p1->transfers.empty());
  ptc::Plan fewer = *p1;
  fewer.transfers.pop_back();
  CHECK(plan_digest(fewer) != plan_digest(*p1));
}

}  // namespace ptcfs
