// SlabDigests: a digest is found only for the live object it was put with.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "daemon/cluster/slab_digests.h"

using ptcfs::SlabDigests;

TEST_CASE("slab digests are found for the same key of the same live version, and for nothing else") {
  SlabDigests d(8);
  auto v1 = std::make_shared<const int>(1), v2 = std::make_shared<const int>(2);
  CHECK_FALSE(d.find(v1, "tp0-pp0\nw\n0 4 0 16").has_value());
  d.put(v1, "tp0-pp0\nw\n0 4 0 16", 0xabcdef);
  CHECK(d.find(v1, "tp0-pp0\nw\n0 4 0 16") == 0xabcdef);
  CHECK_FALSE(d.find(v1, "tp0-pp0\nw\n0 4 16 16").has_value());  // another window
  CHECK_FALSE(d.find(v2, "tp0-pp0\nw\n0 4 0 16").has_value());   // another version
  d.put(v1, "tp0-pp0\nw\n0 4 0 16", 7);                          // replaced
  CHECK(d.find(v1, "tp0-pp0\nw\n0 4 0 16") == 7);
}

TEST_CASE("a digest of a version that is gone is never returned, even for an object at the same address") {
  SlabDigests d(8);
  // Not make_shared: its one allocation (object and control block) stays while the entry's
  // weak pointer does, so no new object could land at the old address.
  std::shared_ptr<const int> v(new int(1));
  const void* where = v.get();
  d.put(v, "k", 42);
  v.reset();
  // Allocate until an object lands where the old one was (the allocator reuses the freed int
  // at once); the entry must not answer for it.
  std::vector<std::shared_ptr<const int>> tries;
  for (int i = 0; i < 1000 && (tries.empty() || tries.back().get() != where); ++i) tries.emplace_back(new int(2));
  REQUIRE(tries.back().get() == where);
  CHECK_FALSE(d.find(tries.back(), "k").has_value());
}

TEST_CASE("slab digests stay within their capacity") {
  SlabDigests d(4);
  auto v = std::make_shared<const int>(1);
  for (int i = 0; i < 4; ++i) d.put(v, std::to_string(i), static_cast<uint64_t>(i));
  CHECK(d.size() == 4);
  CHECK(d.find(v, "3") == 3u);
  d.put(v, "4", 4);  // at capacity: the older ones go
  CHECK(d.size() == 1);
  CHECK(d.find(v, "4") == 4u);
  CHECK_FALSE(d.find(v, "0").has_value());
}
