// make_plan properties over random PTCs and configs (checked against the oracle and the
// write counter in plan_support.h), and hand-written plans over several nodes.
#include "ptc/plan.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "plan_support.h"

using namespace ptcfs;
using namespace ptcfs::ptc;
using namespace plan_support;

namespace {

// Remote bytes served by each node.
std::vector<uint64_t> remote_bytes_by_node(const Layout& from, const Layout& to, const Holdings& h, const Plan& p) {
  std::vector<uint64_t> out(static_cast<size_t>(h.num_nodes), 0);
  for (const Copy& c : p.copies) {
    if (c.src_node == h.dst_node[c.dst_shard]) continue;
    for_each_copy_run(from, to, c,
                      [&](const Run& r) { out[static_cast<size_t>(c.src_node)] += static_cast<uint64_t>(r.len); });
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Properties over random PTCs and configs.

TEST_CASE("random plans move exactly the oracle's bytes, once each, and round-trip", "[plan]") {
  Rng rng(20240601);
  int cases = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const Ptc p = random_ptc(rng);
    auto a = random_layout(rng, p), b = random_layout(rng, p), c = random_layout(rng, p);
    if (!a || !b || !c) continue;
    ++cases;
    INFO(describe(p, {&*a, &*b, &*c}));
    const auto full = full_tensors(p);
    const Buffers oa = oracle(*a, full), ob = oracle(*b, full);

    const Plan ab = plan_of(*a, *b);
    REQUIRE(plan_problem(*a, *b, ab) == "");
    const Buffers got_b = apply(*a, *b, ab, oa);
    REQUIRE(first_difference(*b, got_b, ob) == "");

    // Determinism: the same inputs give the same plan, field for field.
    CHECK(same_plan(ab, plan_of(*a, *b)));

    // A -> B -> A restores A byte for byte.
    const Plan ba = plan_of(*b, *a);
    REQUIRE(plan_problem(*b, *a, ba) == "");
    REQUIRE(first_difference(*a, apply(*b, *a, ba, got_b), oa) == "");

    // A -> C -> B equals A -> B.
    const Plan ac = plan_of(*a, *c), cb = plan_of(*c, *b);
    REQUIRE(plan_problem(*a, *c, ac) == "");
    REQUIRE(plan_problem(*c, *b, cb) == "");
    REQUIRE(first_difference(*b, apply(*c, *b, cb, apply(*a, *c, ac, oa)), got_b) == "");
  }
  CHECK(cases >= 300);
}

TEST_CASE("planning a layout onto itself copies every piece from its own shard, whole", "[plan]") {
  Rng rng(77);
  int cases = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const Ptc p = random_ptc(rng);
    const auto a = random_layout(rng, p);
    if (!a) continue;
    ++cases;
    INFO(describe(p, {&*a}));
    const Plan plan = plan_of(*a, *a);
    REQUIRE(plan_problem(*a, *a, plan) == "");
    // The copies, one per piece in shard, slice, piece order, each the whole piece (a piece
    // empty along the slab dimension, of a tensor with a zero dimension, needs none).
    std::vector<CopyRow> want;
    for (size_t s = 0; s < a->shards().size(); ++s) {
      const auto& slices = a->slices(a->shards()[s]);
      for (size_t j = 0; j < slices.size(); ++j) {
        const TensorSpec& spec = a->tensor(slices[j]);
        const int k = slab_dim(spec);
        auto pieces = slices[j].pieces;
        if (k >= 0)
          std::sort(pieces.begin(), pieces.end(),
                    [k](const Piece& x, const Piece& y) { return x.local.lo[k] < y.local.lo[k]; });
        for (const Piece& pc : pieces) {
          const int64_t lo = k < 0 ? 0 : pc.local.lo[k], len = k < 0 ? 1 : pc.local.hi[k] - pc.local.lo[k];
          const auto si = static_cast<int64_t>(s), ji = static_cast<int64_t>(j);
          if (len > 0) want.push_back({static_cast<int64_t>(slices[j].tensor), si, ji, si, ji, 0, lo, lo, len});
        }
      }
    }
    CHECK(copy_rows(plan) == want);
    CHECK(plan.bytes_remote == 0);
    CHECK(plan.bytes_local + plan.bytes_fill == plan.bytes_total);
  }
  CHECK(cases >= 250);
}

TEST_CASE("random multi-node plans read from the destination's node whenever it holds the bytes", "[plan]") {
  Rng rng(4242);
  int planned = 0, refused = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const Ptc p = random_ptc(rng);
    const auto a = random_layout(rng, p), b = random_layout(rng, p);
    if (!a || !b) continue;
    const Holdings h = random_holdings(rng, *a, *b, rng.uniform(2, 3), 0.15);
    INFO(describe(p, {&*a, &*b}));
    const auto r = make_plan(*a, *b, h);
    if (some_element_unheld(*a, *b, h)) {
      // A needed shard that no node holds.
      CHECK_FALSE(r.is_ok());
      ++refused;
      continue;
    }
    INFO(r.status().to_string());
    REQUIRE(r.is_ok());
    ++planned;
    REQUIRE(plan_problem(*a, *b, h, *r, false) == "");
    const auto full = full_tensors(p);
    REQUIRE(first_difference(*b, apply(*a, *b, *r, oracle(*a, full)), oracle(*b, full)) == "");
    CHECK(same_plan(*r, plan_of(*a, *b, h)));
  }
  CHECK(planned >= 250);
  CHECK(refused >= 10);
}

// ---------------------------------------------------------------------------------------
// Several nodes, by hand.

TEST_CASE("a source on the destination's node wins over the same shard id on another node", "[plan]") {
  const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [4, 4]}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 2);
  Holdings h;
  h.num_nodes = 2;
  h.src_nodes = {{1}, {0}};  // tp0 on node 1, tp1 on node 0
  h.dst_node = {0, 1};
  const Plan plan = plan_of(from, to, h);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{{0, 1, 0, 0, 0, 0, 0, 0, 4}, {0, 0, 0, 1, 0, 1, 0, 0, 4}});
  CHECK(plan.bytes_local == 128);
  CHECK(plan.bytes_remote == 0);
  CHECK(plan_problem(from, to, h, plan, false) == "");
}

TEST_CASE("replicas on two nodes share the remote bytes of a replicated tensor", "[plan]") {
  // One source shard of a 64-byte tensor, held on nodes 0 and 1; four destinations.
  const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [4, 4]}})");
  const Layout from = layout_of(p, 1), to = layout_of(p, 4);
  Holdings h;
  h.num_nodes = 3;
  h.src_nodes = {{0, 1}};

  SECTION("all destinations on a third node alternate between the replicas") {
    h.dst_node = {2, 2, 2, 2};
    const Plan plan = plan_of(from, to, h);
    CHECK(copy_rows(plan) == std::vector<CopyRow>{
                                 {0, 0, 0, 0, 0, 0, 0, 0, 4},
                                 {0, 0, 0, 1, 0, 1, 0, 0, 4},
                                 {0, 0, 0, 2, 0, 0, 0, 0, 4},
                                 {0, 0, 0, 3, 0, 1, 0, 0, 4},
                             });
    CHECK(plan.bytes_remote == 256);
    CHECK(plan.bytes_local == 0);
    CHECK(remote_bytes_by_node(from, to, h, plan) == std::vector<uint64_t>{128, 128, 0});
    CHECK(plan_problem(from, to, h, plan, false) == "");
  }
  SECTION("destinations on the holders' nodes copy locally; the others go to the less loaded holder") {
    // tp0 on node 0 (local, node 0 load 64); tp1 on node 2 takes node 1 (load 0);
    // tp2 on node 2 takes node 0 (tie at 64, first holder); tp3 on node 1 is local.
    h.dst_node = {0, 2, 2, 1};
    const Plan plan = plan_of(from, to, h);
    CHECK(copy_rows(plan) == std::vector<CopyRow>{
                                 {0, 0, 0, 0, 0, 0, 0, 0, 4},
                                 {0, 0, 0, 1, 0, 1, 0, 0, 4},
                                 {0, 0, 0, 2, 0, 0, 0, 0, 4},
                                 {0, 0, 0, 3, 0, 1, 0, 0, 4},
                             });
    CHECK(plan.bytes_local == 128);
    CHECK(plan.bytes_remote == 128);
    CHECK(remote_bytes_by_node(from, to, h, plan) == std::vector<uint64_t>{64, 64, 0});
    CHECK(plan_problem(from, to, h, plan, false) == "");
  }
}

TEST_CASE("a split tensor whose shards are on two nodes is gathered from both", "[plan]") {
  // tp=2 -> tp=1 on a third node: rows 0-3 from node 0, rows 4-7 from the then less loaded node 1.
  const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 1);
  Holdings h;
  h.num_nodes = 3;
  h.src_nodes = {{0, 1}, {0, 1}};
  h.dst_node = {2};
  const Plan plan = plan_of(from, to, h);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 4}, {0, 1, 0, 0, 0, 1, 0, 4, 4}});
  CHECK(remote_bytes_by_node(from, to, h, plan) == std::vector<uint64_t>{64, 64, 0});
  CHECK(plan.bytes_remote == 128);
  CHECK(plan_problem(from, to, h, plan, false) == "");
}
