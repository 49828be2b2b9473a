// Which slices compaction selects: fragmented ones, and those on mostly dead blobs, to a
// fixed point.
#include <catch2/catch.hpp>

#include <map>

#include "daemon/reshard/compactor.h"

using namespace ptcfs;

namespace {
StoredSlice slice(std::vector<Extent> x) { return StoredSlice{std::move(x), std::nullopt}; }
auto sizes(std::map<uint64_t, uint64_t> m) {
  return [m](uint64_t id) -> Result<uint64_t> { return m.at(id); };
}
}  // namespace

TEST_CASE("a slice of many small extents is selected, one of large extents is not", "[compactor]") {
  std::vector<std::vector<StoredSlice>> stored = {
      {slice({{1, 0, 1000}, {1, 5000, 1000}, {1, 10000, 1000}}), slice({{1, 20000, 1 << 20}})}};
  CompactionPolicy p;
  p.min_avg_extent = 4096;
  auto sel = select_compaction(stored, p, sizes({{1, 20000 + (1 << 20)}}));
  REQUIRE(sel);
  CHECK(*sel == Selection{{true, false}});
}

TEST_CASE("a slice on a blob less than half used is selected, and selection cascades", "[compactor]") {
  // Blob 3 is 10% used, so s1 moves; that leaves blob 2 40% used, so s2 moves too;
  // blob 4 stays fully used.
  std::vector<std::vector<StoredSlice>> stored = {{
      slice({{2, 0, 60}, {3, 0, 10}}),  // s1
      slice({{2, 60, 40}}),             // s2
      slice({{4, 0, 100}}),             // s3
  }};
  CompactionPolicy p;
  p.min_avg_extent = 1;
  auto sel = select_compaction(stored, p, sizes({{2, 100}, {3, 100}, {4, 100}}));
  REQUIRE(sel);
  CHECK(*sel == Selection{{true, true, false}});

  const CompactionStats st = compaction_stats(stored, *sel);
  CHECK(st.slices == 2);
  CHECK(st.extents == 3);
  CHECK(st.bytes_from_blobs == 110);
}

TEST_CASE("bytes shared by two slices count once toward a blob's live bytes", "[compactor]") {
  // Two replicas of the same 50 bytes: the blob is exactly half live, which is enough.
  std::vector<std::vector<StoredSlice>> stored = {{slice({{5, 0, 50}})}, {slice({{5, 0, 50}})}};
  CompactionPolicy p;
  p.min_avg_extent = 1;
  auto sel = select_compaction(stored, p, sizes({{5, 100}}));
  REQUIRE(sel);
  CHECK(*sel == Selection{{false}, {false}});
  // At 40 of 100 both move, and identical slices are copied once.
  stored = {{slice({{5, 0, 40}})}, {slice({{5, 0, 40}})}};
  sel = select_compaction(stored, p, sizes({{5, 100}}));
  REQUIRE(sel);
  CHECK(*sel == Selection{{true}, {true}});
  CHECK(compaction_stats(stored, *sel).bytes_from_blobs == 40);
}

TEST_CASE("zero extents (padding) are never live bytes of a blob", "[compactor]") {
  std::vector<std::vector<StoredSlice>> stored = {{slice({{6, 0, 80}, {kZeroBlob, 0, 1000}})}};
  CompactionPolicy p;
  p.min_avg_extent = 1;
  auto sel = select_compaction(stored, p, sizes({{6, 100}}));
  REQUIRE(sel);
  CHECK(*sel == Selection{{false}});
  CHECK(compaction_stats(stored, Selection{{true}}).bytes_from_blobs == 80);
}
