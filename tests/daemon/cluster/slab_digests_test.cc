// SlabDigests: a digest is found only for the version (by serial) and window it was put with.
#include <catch2/catch.hpp>

#include "daemon/cluster/slab_digests.h"

using ptcfs::SlabDigests;

TEST_CASE("slab digests are found for the same key of the same version, and for nothing else") {
  SlabDigests d(8);
  const uint64_t v1 = 1, v2 = 2;
  CHECK_FALSE(d.find(v1, "tp0-pp0\nw\n0 4 0 16").has_value());
  d.put(v1, "tp0-pp0\nw\n0 4 0 16", 0xabcdef);
  CHECK(d.find(v1, "tp0-pp0\nw\n0 4 0 16") == 0xabcdef);
  CHECK_FALSE(d.find(v1, "tp0-pp0\nw\n0 4 16 16").has_value());  // another window
  CHECK_FALSE(d.find(v2, "tp0-pp0\nw\n0 4 0 16").has_value());   // another version
  d.put(v1, "tp0-pp0\nw\n0 4 0 16", 7);                          // replaced
  CHECK(d.find(v1, "tp0-pp0\nw\n0 4 0 16") == 7);
  CHECK(d.size() == 1);
}

TEST_CASE("slab digests stay within their capacity") {
  SlabDigests d(4);
  const uint64_t v = 1;
  for (int i = 0; i < 4; ++i) d.put(v, std::to_string(i), static_cast<uint64_t>(i));
  CHECK(d.size() == 4);
  CHECK(d.find(v, "3") == 3u);
  d.put(v, "4", 4);  // at capacity: the older ones go
  CHECK(d.size() == 1);
  CHECK(d.find(v, "4") == 4u);
  CHECK_FALSE(d.find(v, "0").has_value());
}
