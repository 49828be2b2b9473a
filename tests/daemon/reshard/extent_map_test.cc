// Mapping a plan onto stored extents: contiguous re-cuts stay flat, re-cuts along a later
// dimension become strided extents, one per source piece.
#include <catch2/catch.hpp>

#include "daemon/reshard/extent_map.h"

using namespace ptcfs;

namespace {

ptc::Layout layout(int tp) {
  // w: [4, 8] F32 split along dimension 1 (columns); v: [8, 2] split along dimension 0.
  auto ptc = ptc::parse_ptc_json(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "tensors": {
      "v": {"dtype": "F32", "shape": [8, 2], "tp_dim": 0},
      "w": {"dtype": "F32", "shape": [4, 8], "tp_dim": 1}}})",
                                 "ptc.json");
  REQUIRE(ptc);
  auto l = ptc::Layout::make(*ptc, ptc::Parallelism{tp, 1, 1});
  REQUIRE(l);
  return *l;
}

bool same(const Extent& a, const Extent& b) {
  return a.blob == b.blob && a.offset == b.offset && a.len == b.len && a.stride == b.stride;
}

void check(const StoredSlice& got, uint64_t rows, const std::vector<Extent>& want) {
  CHECK(got.rows == rows);
  REQUIRE(got.extents.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("extent " << i << ": got {" << got.extents[i].blob << ", " << got.extents[i].offset << ", "
                   << got.extents[i].len << ", " << got.extents[i].stride << "}");
    CHECK(same(got.extents[i], want[i]));
  }
}

}  // namespace

TEST_CASE("tp=2 -> tp=1: column halves interleave as two strided extents; row halves stay flat", "[extent_map]") {
  const auto from = layout(2), to = layout(1);
  // Imported: each shard's slices in one blob (shard t in blob 10 + t): v (4x2 floats = 32 B) at 0,
  // w (4 rows of 4 floats = 64 B) at 32.
  std::vector<std::vector<StoredSlice>> old(2);
  for (uint64_t t = 0; t < 2; ++t) {
    old[t].push_back(StoredSlice{{Extent{10 + t, 0, 32, 0}}, 111 + t});   // v
    old[t].push_back(StoredSlice{{Extent{10 + t, 32, 64, 0}}, 222 + t});  // w
  }
  auto plan = ptc::make_plan(from, to, ptc::Holdings::single_node(from, to));
  REQUIRE(plan);
  auto got = map_extents(from, to, *plan, [&](uint32_t s, uint32_t j) -> const StoredSlice& { return old[s][j]; });
  REQUIRE(got.size() == 1);
  REQUIRE(got[0].size() == 2);
  // v: rows 0-3 from shard 0, rows 4-7 from shard 1: two flat extents.
  check(got[0][0], 1, {Extent{10, 0, 32, 0}, Extent{11, 0, 32, 0}});
  // w: each of the 4 rows is 16 B of shard 0's row then 16 B of shard 1's.
  check(got[0][1], 4, {Extent{10, 32, 16, 16}, Extent{11, 32, 16, 16}});
  CHECK_FALSE(got[0][1].xxh3.has_value());

  // And back to tp=2: each shard's w is one lane of the strided slice, whose rows follow each
  // other in its blob, so it is one flat extent again: exactly the imported one.
  const auto plan2 = ptc::make_plan(to, from, ptc::Holdings::single_node(to, from));
  REQUIRE(plan2);
  auto back = map_extents(to, from, *plan2, [&](uint32_t s, uint32_t j) -> const StoredSlice& { return got[s][j]; });
  REQUIRE(back.size() == 2);
  for (uint64_t t = 0; t < 2; ++t) {
    check(back[t][0], 1, {Extent{10 + t, 0, 32, 0}});
    check(back[t][1], 1, {Extent{10 + t, 32, 64, 0}});
  }
}

TEST_CASE("a slice mapped whole from one source keeps its checksum", "[extent_map]") {
  const auto l = layout(2);
  std::vector<std::vector<StoredSlice>> old(2);
  for (uint64_t t = 0; t < 2; ++t) {
    old[t].push_back(StoredSlice{{Extent{10 + t, 0, 32, 0}}, 111 + t});
    old[t].push_back(StoredSlice{{Extent{10 + t, 32, 64, 0}}, 222 + t});
  }
  auto plan = ptc::make_plan(l, l, ptc::Holdings::single_node(l, l));
  REQUIRE(plan);
  auto got = map_extents(l, l, *plan, [&](uint32_t s, uint32_t j) -> const StoredSlice& { return old[s][j]; });
  for (uint64_t t = 0; t < 2; ++t) {
    check(got[t][1], 1, {Extent{10 + t, 32, 64, 0}});
    CHECK(got[t][1].xxh3 == std::optional<uint64_t>(222 + t));
  }
}
