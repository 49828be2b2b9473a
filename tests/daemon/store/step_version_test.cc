// The pieces of a strided slice: row r of extent e at e.offset + r * e.stride.
#include <catch2/catch.hpp>

#include <tuple>
#include <vector>

#include "daemon/store/step_version.h"

using namespace ptcfs;

namespace {
using Piece = std::tuple<uint64_t, uint64_t, uint64_t>;  // blob, offset, length
std::vector<Piece> pieces(const StoredSlice& s, uint64_t off, uint64_t len) {
  std::vector<Piece> out;
  for_each_piece(s, off, len, [&](uint64_t b, uint64_t o, uint64_t n) { out.emplace_back(b, o, n); });
  return out;
}
}  // namespace

TEST_CASE("a strided slice is its rows, each the concatenation of its extents", "[step_version]") {
  StoredSlice s;
  s.rows = 3;
  s.extents = {Extent{7, 100, 4, 10}, Extent{kZeroBlob, 0, 2, 0}, Extent{8, 0, 3, 3}};
  CHECK(row_bytes(s) == 9);
  CHECK(slice_bytes(s) == 27);
  CHECK(pieces(s, 0, 27) == std::vector<Piece>{{7, 100, 4}, {0, 0, 2}, {8, 0, 3},  //
                                               {7, 110, 4}, {0, 0, 2}, {8, 3, 3},  //
                                               {7, 120, 4}, {0, 0, 2}, {8, 6, 3}});
  // A window starting inside row 1's first extent and ending inside row 2's second.
  CHECK(pieces(s, 11, 11) == std::vector<Piece>{{7, 112, 2}, {0, 0, 2}, {8, 3, 3}, {7, 120, 4}});
}

TEST_CASE("a flat slice is its extents in order", "[step_version]") {
  StoredSlice s;
  s.extents = {Extent{3, 0, 10, 0}, Extent{4, 50, 5, 0}};
  CHECK(slice_bytes(s) == 15);
  CHECK(pieces(s, 8, 4) == std::vector<Piece>{{3, 8, 2}, {4, 50, 2}});
}
