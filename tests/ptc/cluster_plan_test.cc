// make_cluster_plan: hand-written plans with exact transfers and copies, its errors, and
// properties over random PTCs, configs and placements on 2-4 nodes, checked by the reference
// executor in cluster_plan_support.h against the oracle in plan_support.h.
#include "ptc/cluster_plan.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "cluster_plan_support.h"
#include "plan_support.h"
#include "ptc/cluster.h"

using namespace ptcfs;
using namespace ptcfs::ptc;
using namespace plan_support;

namespace {

// A two-tensor PTC: "a" F32 [4, 2] split along rows (8 bytes a row), "b" F32 [3] replicated (12 bytes).
Ptc two_tensors() {
  return ptc_of(R"({"a": {"dtype": "F32", "shape": [4, 2], "tp_dim": 0}, "b": {"dtype": "F32", "shape": [3]}})");
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Hand-written plans.

TEST_CASE("tp2 on nodes 0 and 1 -> tp1 on node 2 receives each row half from its holder and b once", "[cluster_plan]") {
  const Ptc p = two_tensors();
  const Layout from = layout_of(p, 2), to = layout_of(p, 1);
  const ClusterHoldings h{{{0}, {1}}, {{2}}, 3};
  const Plan plan = cluster_plan_of(from, to, h);
  // b ties at 16 bytes a node and goes to the lower node id.
  CHECK(transfer_rows(plan) == std::vector<TransferRow>{
                                   {0, 0, 2, 0, 0, 0, 0, 2, 16},
                                   {0, 1, 2, 1, 0, 0, 2, 2, 16},
                                   {1, 0, 2, 0, 1, 0, 0, 3, 12},
                               });
  CHECK(cluster_copy_rows(plan) == std::vector<ClusterCopyRow>{
                                       {0, 0, 0, 0, 0, 0, 2, 0, 0, 2, 0},
                                       {0, 1, 0, 1, 0, 0, 2, 0, 2, 2, 1},
                                       {1, 0, 1, 0, 0, 1, 2, 0, 0, 3, 2},
                                   });
  CHECK(plan.fills.empty());
  CHECK(plan.bytes_remote == 44);
  CHECK(plan.bytes_total == 44);
  CHECK(plan.bytes_local == 0);
  std::vector<uint64_t> per_node;
  CHECK(min_transfer_bytes(from, to, h, &per_node) == 44);
  CHECK(per_node == std::vector<uint64_t>{0, 0, 44});
  CHECK(execution_problem(from, to, h, plan) == "");
}

TEST_CASE("two new shards on one node receive the bytes they share once", "[cluster_plan]") {
  // tp1 on node 0 -> tp2, both ranks on node 1: all of a and b cross once; both ranks read
  // the one slab of a at their own offsets, and the one slab of b.
  const Ptc p = two_tensors();
  const Layout from = layout_of(p, 1), to = layout_of(p, 2);
  const ClusterHoldings h{{{0}}, {{1}, {1}}, 2};
  const Plan plan = cluster_plan_of(from, to, h);
  CHECK(transfer_rows(plan) == std::vector<TransferRow>{{0, 0, 1, 0, 0, 0, 0, 4, 32}, {1, 0, 1, 0, 1, 0, 0, 3, 12}});
  CHECK(cluster_copy_rows(plan) == std::vector<ClusterCopyRow>{
                                       {0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0},
                                       {1, 0, 1, 0, 0, 1, 1, 0, 0, 3, 1},
                                       {0, 0, 0, 0, 1, 0, 1, 2, 0, 2, 0},
                                       {1, 0, 1, 0, 1, 1, 1, 0, 0, 3, 1},
                                   });
  CHECK(plan.bytes_remote == 44);
  CHECK(min_transfer_bytes(from, to, h) == 44);
  CHECK(plan.bytes_total == 56);
  CHECK(execution_problem(from, to, h, plan) == "");
}

TEST_CASE("a node holding everything it needs copies locally; only the missing row crosses", "[cluster_plan]") {
  // tp2 (tp0 on node 0, tp1 on nodes 0 and 1) -> tp4 with ranks 0, 3 on node 0 and 1, 2 on
  // node 1. Node 0 holds all; node 1 lacks row 1 only.
  const Ptc p = two_tensors();
  const Layout from = layout_of(p, 2), to = layout_of(p, 4);
  const ClusterHoldings h{{{0}, {0, 1}}, {{0}, {1}, {1}, {0}}, 2};
  const Plan plan = cluster_plan_of(from, to, h);
  CHECK(transfer_rows(plan) == std::vector<TransferRow>{{0, 0, 1, 0, 0, 1, 1, 1, 8}});
  CHECK(cluster_copy_rows(plan) == std::vector<ClusterCopyRow>{
                                       {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, -1},
                                       {1, 0, 1, 0, 0, 1, 0, 0, 0, 3, -1},
                                       {0, 1, 0, 0, 3, 0, 0, 1, 0, 1, -1},
                                       {1, 0, 1, 0, 3, 1, 0, 0, 0, 3, -1},
                                       {0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0},
                                       {1, 1, 1, 1, 1, 1, 1, 0, 0, 3, -1},
                                       {0, 1, 0, 1, 2, 0, 1, 0, 0, 1, -1},
                                       {1, 1, 1, 1, 2, 1, 1, 0, 0, 3, -1},
                                   });
  std::vector<uint64_t> per_node;
  CHECK(min_transfer_bytes(from, to, h, &per_node) == 8);
  CHECK(per_node == std::vector<uint64_t>{0, 8});
  CHECK(plan.bytes_remote == 8);
  const Plan on0 = node_part(plan, 0);
  CHECK(on0.transfers.empty());
  CHECK(on0.bytes_remote == 0);
  CHECK(on0.copies.size() == 4);
  for (const Copy& c : on0.copies) {
    CHECK(c.src_node == 0);
    CHECK(c.transfer == -1);
  }
  CHECK(execution_problem(from, to, h, plan) == "");
}

TEST_CASE("node_part keeps a node's transfers and renumbers its copies' transfer indices", "[cluster_plan]") {
  // tp2 swapped between two nodes: each receives the other's rows of a, and keeps b.
  const Ptc p = two_tensors();
  const Layout from = layout_of(p, 2), to = layout_of(p, 2);
  const ClusterHoldings h{{{0}, {1}}, {{1}, {0}}, 2};
  const Plan plan = cluster_plan_of(from, to, h);
  CHECK(transfer_rows(plan) == std::vector<TransferRow>{{0, 1, 0, 1, 0, 0, 2, 2, 16}, {0, 0, 1, 0, 0, 0, 0, 2, 16}});
  CHECK(cluster_copy_rows(plan) == std::vector<ClusterCopyRow>{
                                       {0, 1, 0, 1, 1, 0, 0, 0, 0, 2, 0},
                                       {1, 0, 1, 0, 1, 1, 0, 0, 0, 3, -1},
                                       {0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 1},
                                       {1, 1, 1, 1, 0, 1, 1, 0, 0, 3, -1},
                                   });
  CHECK(min_transfer_bytes(from, to, h) == 32);
  const Plan on0 = node_part(plan, 0), on1 = node_part(plan, 1);
  CHECK(transfer_rows(on0) == std::vector<TransferRow>{{0, 1, 0, 1, 0, 0, 2, 2, 16}});
  CHECK(cluster_copy_rows(on0) ==
        std::vector<ClusterCopyRow>{{0, 1, 0, 1, 1, 0, 0, 0, 0, 2, 0}, {1, 0, 1, 0, 1, 1, 0, 0, 0, 3, -1}});
  CHECK(transfer_rows(on1) == std::vector<TransferRow>{{0, 0, 1, 0, 0, 0, 0, 2, 16}});
  CHECK(cluster_copy_rows(on1) ==
        std::vector<ClusterCopyRow>{{0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0}, {1, 1, 1, 1, 0, 1, 1, 0, 0, 3, -1}});
  CHECK(on0.bytes_remote == 16);
  CHECK(on1.bytes_remote == 16);
  CHECK(execution_problem(from, to, h, plan) == "");
}

TEST_CASE("DP replicas on two nodes share the sending to a third, slab by slab", "[cluster_plan]") {
  // tp1 dp2 on nodes n0, n1 -> tp1 on n2. The fused a (two 32-byte parts) is sent part 0 by
  // n0 and part 1 by the then less loaded n1; b (loads tied at 32) by n0.
  const Ptc p = ptc_of(R"({"a": {"dtype": "F32", "shape": [8, 2], "tp_dim": 0, "parts": 2},
                           "b": {"dtype": "F32", "shape": [3]}})");
  auto cluster = parse_cluster_json(R"({"nodes": [{"id": "n0", "addr": "h:1"}, {"id": "n1", "addr": "h:2"},
                                                  {"id": "n2", "addr": "h:3"}]})",
                                    "cluster.json");
  REQUIRE(cluster);
  const Layout from = layout_of(p, 1, 1, 2), to = layout_of(p, 1);
  auto src = shard_nodes(from, *cluster);
  auto dst = shard_nodes_on(to, *cluster, {"n2"});
  REQUIRE(src);
  REQUIRE(dst);
  CHECK(*src == std::vector<std::vector<int>>{{0, 1}});
  const ClusterHoldings h{*src, *dst, 3};
  const Plan plan = cluster_plan_of(from, to, h);
  CHECK(transfer_rows(plan) == std::vector<TransferRow>{
                                   {0, 0, 2, 0, 0, 0, 0, 4, 32},
                                   {0, 1, 2, 0, 0, 4, 4, 4, 32},
                                   {1, 0, 2, 0, 1, 0, 0, 3, 12},
                               });
  CHECK(plan.bytes_remote == 76);
  CHECK(min_transfer_bytes(from, to, h) == 76);
  CHECK(execution_problem(from, to, h, plan) == "");
}

TEST_CASE("replicas tied on load send from the lower node id, in whatever order src_nodes lists them",
          "[cluster_plan]") {
  // The header promises ties go to the lower node id; src_nodes need not be sorted.
  const Ptc p = ptc_of(R"({"b": {"dtype": "F32", "shape": [3]}})");
  const Layout from = layout_of(p, 1), to = layout_of(p, 1);
  const Plan sorted = cluster_plan_of(from, to, ClusterHoldings{{{0, 1}}, {{2}}, 3});
  const Plan unsorted = cluster_plan_of(from, to, ClusterHoldings{{{1, 0}}, {{2}}, 3});
  CHECK(transfer_rows(sorted) == std::vector<TransferRow>{{0, 0, 2, 0, 0, 0, 0, 3, 12}});
  CHECK(transfer_rows(unsorted) == std::vector<TransferRow>{{0, 0, 2, 0, 0, 0, 0, 3, 12}});
}

// ---------------------------------------------------------------------------------------
// Errors.

TEST_CASE("holdings that do not match the layouts or name unknown nodes are invalid arguments", "[cluster_plan]") {
  const Ptc p = two_tensors();
  const Layout from = layout_of(p, 2), to = layout_of(p, 1);
  auto code_of = [&](const ClusterHoldings& h) { return make_cluster_plan(from, to, h).status().code(); };
  CHECK(code_of({{{0}}, {{2}}, 3}) == Code::kInvalidArgument);            // one src entry for two shards
  CHECK(code_of({{{0}, {1}}, {{2}, {2}}, 3}) == Code::kInvalidArgument);  // two dst entries for one shard
  CHECK(code_of({{{0}, {3}}, {{2}}, 3}) == Code::kInvalidArgument);       // node 3 of 3
  CHECK(code_of({{{0}, {-1}}, {{2}}, 3}) == Code::kInvalidArgument);      // negative node
  CHECK(code_of({{{0}, {1}}, {{3}}, 3}) == Code::kInvalidArgument);       // dst node out of range
  CHECK(code_of({{{}, {}}, {{}}, 0}) == Code::kInvalidArgument);          // no nodes
  const Ptc other =                                                       // a's shape differs
      ptc_of(R"({"a": {"dtype": "F32", "shape": [4, 4], "tp_dim": 0}, "b": {"dtype": "F32", "shape": [3]}})");
  const auto r = make_cluster_plan(from, layout_of(other, 1), ClusterHoldings{{{0}, {1}}, {{2}}, 3});
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("'a'") != std::string::npos);
  CHECK(code_of({{{0}, {1}}, {{2}}, 3}) == Code::kOk);
}

TEST_CASE("an element no live node holds makes the plan unavailable, naming the tensor", "[cluster_plan]") {
  const Ptc p = two_tensors();
  const Layout from = layout_of(p, 2);
  // tp0 (rows 0-1 of a) is on no live node; b is still on tp1's node.
  const auto r = make_cluster_plan(from, layout_of(p, 1), ClusterHoldings{{{}, {1}}, {{2}}, 3});
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kUnavailable);
  CHECK(r.status().message().find("tensor 'a'") != std::string::npos);

  SECTION("a dead old shard no new shard needs does not stop the plan") {
    const Layout to = layout_of(p, 2);
    const ClusterHoldings h{{{}, {1}}, {{}, {2}}, 3};  // new tp0 placed nowhere
    const Plan plan = cluster_plan_of(from, to, h);
    CHECK(transfer_rows(plan) == std::vector<TransferRow>{{0, 1, 2, 1, 0, 0, 2, 2, 16}, {1, 1, 2, 1, 1, 0, 0, 3, 12}});
    CHECK(execution_problem(from, to, h, plan) == "");
  }
}

// ---------------------------------------------------------------------------------------
// Properties over random PTCs, configs and placements.

TEST_CASE("random cluster plans move exactly bytes_min and rebuild every instance byte for byte", "[cluster_plan]") {
  Rng rng(20240917);
  int planned = 0, refused = 0, with_transfers = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const Ptc p = random_ptc(rng);
    const auto a = random_layout(rng, p), b = random_layout(rng, p);
    if (!a || !b) continue;
    const ClusterHoldings h = random_cluster_holdings(rng, *a, *b, rng.uniform(2, 4));
    INFO(describe(p, {&*a, &*b}));
    const auto r = make_cluster_plan(*a, *b, h);
    // Every new shard is placed somewhere, so every element of the new layout is needed.
    if (some_element_unheld(*a, *b, Holdings{h.src_nodes, std::vector<int>(b->shards().size(), 0), h.num_nodes})) {
      CHECK(r.status().code() == Code::kUnavailable);
      CHECK(r.status().message().find("of tensor '") != std::string::npos);
      ++refused;
      continue;
    }
    INFO(r.status().to_string());
    REQUIRE(r.is_ok());
    const Plan& plan = *r;
    ++planned;
    if (!plan.transfers.empty()) ++with_transfers;

    // (a), (b): the plan moves exactly bytes_min, in total and into every node.
    std::vector<uint64_t> per_node;
    const uint64_t min = min_transfer_bytes(*a, *b, h, &per_node);
    std::vector<uint64_t> received(static_cast<size_t>(h.num_nodes), 0);
    uint64_t sum = 0;
    for (const Transfer& t : plan.transfers) {
      sum += t.bytes;
      received[static_cast<size_t>(t.dst_node)] += t.bytes;
    }
    CHECK(plan.bytes_remote == sum);
    CHECK(sum == min);
    CHECK(received == per_node);

    // (c), (d), (f): the reference executor (local copies from held shards, no transfer of
    // anything its destination holds).
    REQUIRE(execution_problem(*a, *b, h, plan) == "");

    // Order: copies and fills by (dst_node, shard, slice, position); transfers by (dst_node, tensor, glo).
    for (size_t i = 1; i < plan.copies.size(); ++i) {
      const Copy &x = plan.copies[i - 1], &y = plan.copies[i];
      CHECK(std::tuple(x.dst_node, x.dst_shard, x.dst_slice, x.dst_lo) <
            std::tuple(y.dst_node, y.dst_shard, y.dst_slice, y.dst_lo));
    }
    for (size_t i = 1; i < plan.fills.size(); ++i) {
      const Fill &x = plan.fills[i - 1], &y = plan.fills[i];
      CHECK(std::tuple(x.dst_node, x.dst_shard, x.dst_slice, x.dst_lo) <
            std::tuple(y.dst_node, y.dst_shard, y.dst_slice, y.dst_lo));
    }
    for (size_t i = 1; i < plan.transfers.size(); ++i) {
      const Transfer &x = plan.transfers[i - 1], &y = plan.transfers[i];
      CHECK(std::tuple(x.dst_node, x.tensor, x.glo + x.len) <= std::tuple(y.dst_node, y.tensor, y.glo));
    }

    // node_part: the parts, in node order, are the plan with transfer indices shifted.
    std::vector<TransferRow> transfers;
    std::vector<ClusterCopyRow> copies;
    std::vector<ClusterFillRow> fills;
    for (int n = 0; n < h.num_nodes; ++n) {
      const Plan part = node_part(plan, n);
      const auto shift = static_cast<int64_t>(transfers.size());
      for (auto row : cluster_copy_rows(part)) {
        if (row[10] >= 0) row[10] += shift;
        copies.push_back(row);
      }
      for (const auto& row : transfer_rows(part)) transfers.push_back(row);
      for (const auto& row : cluster_fill_rows(part)) fills.push_back(row);
      CHECK(part.bytes_remote == per_node[static_cast<size_t>(n)]);
    }
    CHECK(transfers == transfer_rows(plan));
    CHECK(copies == cluster_copy_rows(plan));
    CHECK(fills == cluster_fill_rows(plan));

    // (e) Determinism.
    const Plan again = cluster_plan_of(*a, *b, h);
    CHECK(transfer_rows(again) == transfer_rows(plan));
    CHECK(cluster_copy_rows(again) == cluster_copy_rows(plan));
    CHECK(cluster_fill_rows(again) == cluster_fill_rows(plan));
    CHECK(std::tuple(again.bytes_total, again.bytes_local, again.bytes_remote, again.bytes_fill) ==
          std::tuple(plan.bytes_total, plan.bytes_local, plan.bytes_remote, plan.bytes_fill));
  }
  CHECK(planned >= 150);
  CHECK(refused >= 10);
  CHECK(with_transfers >= 100);
}
