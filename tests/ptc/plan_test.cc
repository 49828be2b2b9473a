// Hand-written make_plan cases with exact expected copies, fills and runs, and the errors
// make_plan reports. The helpers (fixtures, oracle, write counter) are in plan_support.h.
#include "ptc/plan.h"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "plan_support.h"

using namespace ptcfs;
using namespace ptcfs::ptc;
using namespace plan_support;

namespace {

// A run as {src, dst, len}.
using RunRow = std::array<int64_t, 3>;

std::vector<RunRow> copy_runs(const Layout& from, const Layout& to, const Copy& c) {
  std::vector<RunRow> out;
  for_each_copy_run(from, to, c, [&](const Run& r) { out.push_back({r.src, r.dst, r.len}); });
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Hand-written plans.

TEST_CASE("tp2 -> tp4 on a row-split [8, 4] tensor copies each half of a source slice to one rank", "[plan]") {
  const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 4);
  const Plan plan = plan_of(from, to);
  // {tensor, src_shard, src_slice, dst_shard, dst_slice, src_node, src_lo, dst_lo, len}
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 2},
                               {0, 0, 0, 1, 0, 0, 2, 0, 2},
                               {0, 1, 0, 2, 0, 0, 0, 0, 2},
                               {0, 1, 0, 3, 0, 0, 2, 0, 2},
                           });
  CHECK(plan.fills.empty());
  CHECK(plan.bytes_total == 128);
  CHECK(plan.bytes_local == 128);
  CHECK(plan.bytes_remote == 0);
  CHECK(plan.bytes_fill == 0);
  // Whole rows are contiguous: one run of two 16-byte rows.
  CHECK(copy_runs(from, to, plan.copies[1]) == std::vector<RunRow>{{32, 0, 32}});
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("tp2 -> tp4 on a column-split [4, 8] tensor copies one run per row", "[plan]") {
  const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [4, 8], "tp_dim": 1}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 4);
  const Plan plan = plan_of(from, to);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 2},
                               {0, 0, 0, 1, 0, 0, 2, 0, 2},
                               {0, 1, 0, 2, 0, 0, 0, 0, 2},
                               {0, 1, 0, 3, 0, 0, 2, 0, 2},
                           });
  // Columns 2-3 of a 4-column source row (16 bytes) to a 2-column destination row (8 bytes).
  CHECK(copy_runs(from, to, plan.copies[1]) == std::vector<RunRow>{{8, 0, 8}, {24, 8, 8}, {40, 16, 8}, {56, 24, 8}});
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("tp2 -> tp4 splits rows of each fused part separately", "[plan]") {
  // 8 rows in 2 parts of 4. tp=2 rank t holds rows [2t, 2t+2) and [4+2t, 6+2t); tp=4 rank t
  // holds row t and row 4+t: each destination piece comes from a different local chunk.
  const Ptc p = ptc_of(R"({"qk": {"dtype": "F32", "shape": [8, 2], "tp_dim": 0, "parts": 2}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 4);
  const Plan plan = plan_of(from, to);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 1},
                               {0, 0, 0, 0, 0, 0, 2, 1, 1},
                               {0, 0, 0, 1, 0, 0, 1, 0, 1},
                               {0, 0, 0, 1, 0, 0, 3, 1, 1},
                               {0, 1, 0, 2, 0, 0, 0, 0, 1},
                               {0, 1, 0, 2, 0, 0, 2, 1, 1},
                               {0, 1, 0, 3, 0, 0, 1, 0, 1},
                               {0, 1, 0, 3, 0, 0, 3, 1, 1},
                           });
  CHECK(plan.fills.empty());
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("tp4 -> tp2 gathers each fused part of a rank from two sources", "[plan]") {
  const Ptc p = ptc_of(R"({"qk": {"dtype": "F32", "shape": [8, 2], "tp_dim": 0, "parts": 2}})");
  const Layout from = layout_of(p, 4), to = layout_of(p, 2);
  const Plan plan = plan_of(from, to);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 1},
                               {0, 1, 0, 0, 0, 0, 0, 1, 1},
                               {0, 0, 0, 0, 0, 0, 1, 2, 1},
                               {0, 1, 0, 0, 0, 0, 1, 3, 1},
                               {0, 2, 0, 1, 0, 0, 0, 0, 1},
                               {0, 3, 0, 1, 0, 0, 0, 1, 1},
                               {0, 2, 0, 1, 0, 0, 1, 2, 1},
                               {0, 3, 0, 1, 0, 0, 1, 3, 1},
                           });
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("pad_to: vocab 10, pad_to 4, tp1 -> tp2 fills the rows past the vocabulary with zeros", "[plan]") {
  // tp=1: 12 local rows, rows 10-11 padding. tp=2: 8 rows per rank; rank 1 holds rows 8-9
  // and 6 rows of padding. A row is 2 F32 = 8 bytes.
  const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [10, 2], "tp_dim": 0, "pad_to": 4}})");
  const Layout tp1 = layout_of(p, 1), tp2 = layout_of(p, 2), tp4 = layout_of(p, 4);

  const Plan up = plan_of(tp1, tp2);
  CHECK(copy_rows(up) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 8}, {0, 0, 0, 1, 0, 0, 8, 0, 2}});
  // {tensor, dst_shard, dst_slice, dst_lo, len}
  CHECK(fill_rows(up) == std::vector<FillRow>{{0, 1, 0, 2, 6}});
  CHECK(up.bytes_total == 128);
  CHECK(up.bytes_fill == 48);
  CHECK(up.bytes_local == 80);
  CHECK(plan_problem(tp1, tp2, up) == "");

  const Plan down = plan_of(tp2, tp1);
  CHECK(copy_rows(down) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 8}, {0, 1, 0, 0, 0, 0, 0, 8, 2}});
  CHECK(fill_rows(down) == std::vector<FillRow>{{0, 0, 0, 10, 2}});
  CHECK(down.bytes_total == 96);
  CHECK(down.bytes_fill == 16);
  CHECK(plan_problem(tp2, tp1, down) == "");

  // tp=4: 4 rows per rank of 16; rank 2 holds rows 8-9, rank 3 only padding.
  const Plan four = plan_of(tp1, tp4);
  CHECK(copy_rows(four) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 4},
                               {0, 0, 0, 1, 0, 0, 4, 0, 4},
                               {0, 0, 0, 2, 0, 0, 8, 0, 2},
                           });
  CHECK(fill_rows(four) == std::vector<FillRow>{{0, 2, 0, 2, 2}, {0, 3, 0, 0, 4}});
  CHECK(plan_problem(tp1, tp4, four) == "");

  // The fills are zeros in the executed result; the copies carry the rows.
  const auto full = full_tensors(p);
  CHECK(first_difference(tp2, apply(tp1, tp2, up, oracle(tp1, full)), oracle(tp2, full)) == "");
  CHECK(first_difference(tp4, apply(tp1, tp4, four, oracle(tp1, full)), oracle(tp4, full)) == "");
}

TEST_CASE("pp1 -> pp2 moves each layer's tensor to its stage", "[plan]") {
  const Ptc p = ptc_of(R"({"layers/0/w": {"dtype": "F32", "shape": [2, 2], "layer": 0},
                           "layers/1/w": {"dtype": "F32", "shape": [2, 2], "layer": 1}})",
                       2);
  const Layout from = layout_of(p, 1, 1), to = layout_of(p, 1, 2);
  const Plan plan = plan_of(from, to);
  // Source tp0-pp0 holds both (slices 0 and 1); tp0-pp1 receives layer 1 as its slice 0.
  CHECK(copy_rows(plan) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 2}, {1, 0, 1, 1, 0, 0, 0, 0, 2}});
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("a tensor on every stage is copied from the same shard id, else from the lowest shard", "[plan]") {
  const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [4], "stage": "all"}})", 2);
  const Layout from = layout_of(p, 1, 2), to = layout_of(p, 2, 2);
  const Plan plan = plan_of(from, to);
  // from: tp0-pp0, tp0-pp1. to: tp0-pp0, tp1-pp0, tp0-pp1, tp1-pp1.
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 4},
                               {0, 0, 0, 1, 0, 0, 0, 0, 4},
                               {0, 1, 0, 2, 0, 0, 0, 0, 4},
                               {0, 0, 0, 3, 0, 0, 0, 0, 4},
                           });
  CHECK(plan_problem(from, to, plan) == "");
}

// ---------------------------------------------------------------------------------------
// Errors.

TEST_CASE("make_plan refuses layouts of different PTCs", "[plan]") {
  const Ptc base = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
  const Layout from = layout_of(base, 2);
  const char* others[] = {
      R"({"w": {"dtype": "F32", "shape": [8, 8], "tp_dim": 0}})",                                       // shape
      R"({"w": {"dtype": "F16", "shape": [8, 4], "tp_dim": 0}})",                                       // dtype
      R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 1}})",                                       // tp_dim
      R"({"w": {"dtype": "F32", "shape": [8, 4]}})",                                                    // replicated
      R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "parts": 2}})",                           // parts
      R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "pad_to": 2}})",                          // pad_to
      R"({"v": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})",                                       // name
      R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}, "x": {"dtype": "F32", "shape": [1]}})",  // count
  };
  for (const char* other : others) {
    INFO(other);
    const Layout to = layout_of(ptc_of(other), 2);
    const auto r = make_plan(from, to, Holdings::single_node(from, to));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    const auto back = make_plan(to, from, Holdings::single_node(to, from));
    REQUIRE_FALSE(back.is_ok());
    CHECK(back.status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("make_plan refuses holdings that do not match the layouts", "[plan]") {
  const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 4);
  const Holdings good = Holdings::single_node(from, to);
  REQUIRE(make_plan(from, to, good).is_ok());

  SECTION("one source shard too few") {
    Holdings h = good;
    h.src_nodes.pop_back();
    const auto r = make_plan(from, to, h);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  SECTION("one destination shard too many") {
    Holdings h = good;
    h.dst_node.push_back(0);
    const auto r = make_plan(from, to, h);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  SECTION("swapped layouts") {
    const auto r = make_plan(to, from, good);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  SECTION("a node id outside [0, num_nodes)") {
    for (auto mutate : std::initializer_list<void (*)(Holdings&)>{
             [](Holdings& h) { h.src_nodes[1] = {1}; },
             [](Holdings& h) {
               h.src_nodes[0] = {0, -1};
             },
             [](Holdings& h) { h.dst_node[2] = 1; },
             [](Holdings& h) { h.dst_node[0] = -1; },
             [](Holdings& h) { h.num_nodes = 0; },
         }) {
      Holdings h = good;
      mutate(h);
      const auto r = make_plan(from, to, h);
      REQUIRE_FALSE(r.is_ok());
      CHECK(r.status().code() == Code::kInvalidArgument);
    }
  }
}

TEST_CASE("a needed shard held by no node is an error; an unneeded one is not", "[plan]") {
  SECTION("the only source of rows 4-7 is held nowhere") {
    const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
    const Layout from = layout_of(p, 2), to = layout_of(p, 1);
    Holdings h = Holdings::single_node(from, to);
    h.src_nodes[1].clear();
    const auto r = make_plan(from, to, h);
    REQUIRE_FALSE(r.is_ok());
    CHECK_THAT(r.status().message(), Catch::Contains("'w'"));
  }
  SECTION("a replicated tensor is read from the shard that is held") {
    const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [4, 4]}})");
    const Layout from = layout_of(p, 2), to = layout_of(p, 2);
    Holdings h = Holdings::single_node(from, to);
    h.src_nodes[1].clear();
    const Plan plan = plan_of(from, to, h);
    CHECK(copy_rows(plan) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 4}, {0, 0, 0, 1, 0, 0, 0, 0, 4}});
    CHECK(plan_problem(from, to, h, plan, true) == "");
  }
}
