#include "ptc/region.h"

#include <catch2/catch.hpp>

#include <array>
#include <map>
#include <random>
#include <vector>

using namespace ptcfs;
using namespace ptcfs::ptc;

namespace {

// Runs as {src, dst, len} triples, which compare and print.
using Runs = std::vector<std::array<int64_t, 3>>;
enum : size_t { kSrc, kDst, kLen };

Runs runs_of(const Box& r, const Box& s, const Box& d, size_t elem) {
  Runs out;
  for_each_run(r, s, d, elem, [&](const Run& run) { out.push_back({run.src, run.dst, run.len}); });
  return out;
}

Runs runs_in(const Box& r, const Box& s, const Box& d, size_t elem, int64_t lo, int64_t hi) {
  Runs out;
  for_each_run_in(r, s, d, elem, lo, hi, [&](const Run& run) { out.push_back({run.src, run.dst, run.len}); });
  return out;
}

// Byte offset of element `idx` (global coordinates) in a buffer holding `b`.
int64_t offset_in(const Box& b, const std::vector<int64_t>& idx, size_t elem) {
  int64_t off = 0;
  for (size_t j = 0; j < b.rank(); ++j) off = off * (b.hi[j] - b.lo[j]) + (idx[j] - b.lo[j]);
  return off * static_cast<int64_t>(elem);
}

// The reference: dst byte -> src byte for every byte of every element of r, element by element.
std::map<int64_t, int64_t> brute_force(const Box& r, const Box& s, const Box& d, size_t elem) {
  std::map<int64_t, int64_t> out;
  if (r.empty()) return out;
  std::vector<int64_t> idx = r.lo;
  while (true) {
    const int64_t so = offset_in(s, idx, elem), dof = offset_in(d, idx, elem);
    for (size_t b = 0; b < elem; ++b) out[dof + static_cast<int64_t>(b)] = so + static_cast<int64_t>(b);
    size_t j = r.rank();
    while (j > 0) {
      --j;
      if (++idx[j] < r.hi[j]) break;
      idx[j] = r.lo[j];
      if (j == 0) return out;
    }
    if (r.rank() == 0) return out;
  }
}

std::map<int64_t, int64_t> expand(const Runs& runs) {
  std::map<int64_t, int64_t> out;
  for (const auto& [src, dst, len] : runs)
    for (int64_t b = 0; b < len; ++b) out[dst + b] = src + b;
  return out;
}

// Random box inside `outer` (non-empty when outer is).
Box sub_box(const Box& outer, std::mt19937& rng) {
  Box b = outer;
  for (size_t j = 0; j < outer.rank(); ++j) {
    std::uniform_int_distribution<int64_t> pick(outer.lo[j], outer.hi[j] - 1);
    int64_t x = pick(rng), y = pick(rng);
    if (x > y) std::swap(x, y);
    // Often keep the full extent, so that trailing dimensions merge.
    if (rng() % 3 == 0) {
      x = outer.lo[j];
      y = outer.hi[j] - 1;
    }
    b.lo[j] = x;
    b.hi[j] = y + 1;
  }
  return b;
}

struct Case {
  Box r, s, d;
  size_t elem;
};

// A random copy: s and d inside a global shape of rank 1..4, r inside both.
Case random_case(std::mt19937& rng) {
  const size_t rank = 1 + rng() % 4;
  Shape g(rank);
  for (auto& x : g) x = 1 + static_cast<int64_t>(rng() % 6);
  const Box global = Box::of_shape(g);
  const size_t elems[] = {1, 2, 4, 8};
  while (true) {
    Box s = rng() % 4 == 0 ? global : sub_box(global, rng);
    Box d = rng() % 4 == 0 ? global : sub_box(global, rng);
    Box both = intersect(s, d);
    if (both.empty()) continue;
    Box r = rng() % 3 == 0 ? both : sub_box(both, rng);
    return {r, s, d, elems[rng() % 4]};
  }
}

}  // namespace

TEST_CASE("num_elements and shape_string of shapes", "[region]") {
  CHECK(num_elements({}) == 1);
  CHECK(num_elements({3, 4}) == 12);
  CHECK(num_elements({3, 0, 4}) == 0);
  CHECK(shape_string({}) == "[]");
  CHECK(shape_string({3, 4}) == "[3, 4]");
}

TEST_CASE("Box extent, num_elements and to_string", "[region]") {
  const Box b{{0, 2}, {4, 8}};
  CHECK(b.rank() == 2);
  CHECK(b.extent() == Shape{4, 6});
  CHECK(b.num_elements() == 24);
  CHECK(b.to_string() == "[0:4, 2:8)");
  CHECK(Box{{1}, {1}}.num_elements() == 0);
  CHECK(Box{{3, 0}, {1, 5}}.num_elements() == 0);  // an inverted dimension counts as empty
  CHECK(Box{}.num_elements() == 1);                // a scalar
  CHECK_FALSE(Box{}.empty());
  CHECK(Box::of_shape({2, 3}) == Box{{0, 0}, {2, 3}});
  CHECK(b.translated({10, -2}) == Box{{10, 0}, {14, 6}});
}

TEST_CASE("intersect of overlapping, nested and disjoint boxes", "[region]") {
  const Box a{{0, 0}, {4, 8}};
  CHECK(intersect(a, Box{{2, 6}, {6, 10}}) == Box{{2, 6}, {4, 8}});
  CHECK(intersect(a, Box{{1, 1}, {2, 2}}) == Box{{1, 1}, {2, 2}});
  const Box none = intersect(a, Box{{5, 0}, {7, 8}});
  CHECK(none.empty());
  CHECK(none.lo[0] == none.hi[0]);
  // Touching edges do not overlap.
  CHECK(intersect(a, Box{{0, 8}, {4, 9}}).empty());
  CHECK(intersect(Box{}, Box{}) == Box{});
}

TEST_CASE("contains is inclusion, and every empty box is contained", "[region]") {
  const Box a{{0, 0}, {4, 8}};
  CHECK(a.contains(a));
  CHECK(a.contains(Box{{1, 2}, {4, 8}}));
  CHECK_FALSE(a.contains(Box{{1, 2}, {5, 8}}));
  CHECK_FALSE(a.contains(Box{{-1, 0}, {2, 2}}));
  CHECK(a.contains(Box{{9, 9}, {9, 10}}));  // empty, far outside
  CHECK_FALSE(a.contains(Box{{0}, {1}}));   // rank differs
  CHECK(Box{}.contains(Box{}));
}

TEST_CASE("for_each_run merges whole trailing dimensions into one run", "[region]") {
  const Box s{{0, 0, 0}, {4, 3, 5}};
  // Whole buffer: one run.
  CHECK(runs_of(s, s, s, 4) == Runs{{0, 0, 4 * 60}});
  // Rows 1..2 of a 2-d buffer into a buffer holding just them: one run.
  const Box g{{0, 0}, {4, 6}}, rows{{1, 0}, {3, 6}};
  CHECK(runs_of(rows, g, rows, 2) == Runs{{6 * 2, 0, 12 * 2}});
  // Slabs 1..2 of a 3-d buffer: one run covering both slabs.
  const Box slabs{{1, 0, 0}, {3, 3, 5}};
  CHECK(runs_of(slabs, s, s, 1) == Runs{{15, 15, 30}});
}

TEST_CASE("for_each_run gives one run per row for a column block", "[region]") {
  // Columns 2..5 of a 3x8 buffer into a 3x3 buffer: three runs of 3 elements.
  const Box g{{0, 0}, {3, 8}}, cols{{0, 2}, {3, 5}};
  CHECK(runs_of(cols, g, cols, 4) == Runs{{2 * 4, 0, 12}, {10 * 4, 12, 12}, {18 * 4, 24, 12}});
  // And back again.
  CHECK(runs_of(cols, cols, g, 4) == Runs{{0, 2 * 4, 12}, {12, 10 * 4, 12}, {24, 18 * 4, 12}});
  // Whole rows of s but a column block of d: still a run per row.
  const Box narrow{{0, 2}, {3, 5}}, wide{{0, 0}, {3, 6}};
  CHECK(runs_of(narrow, narrow, wide, 1) == Runs{{0, 2, 3}, {3, 8, 3}, {6, 14, 3}});
}

TEST_CASE("for_each_run of a scalar is one run of one element", "[region]") {
  const Box scalar{};
  CHECK(runs_of(scalar, scalar, scalar, 8) == Runs{{0, 0, 8}});
  CHECK(runs_in(scalar, scalar, scalar, 8, 3, 5) == Runs{{3, 3, 2}});
  CHECK(runs_in(scalar, scalar, scalar, 8, 8, 16).empty());
  const double x = 2.5;
  double y = 0;
  copy_region(scalar, &x, scalar, &y, scalar, sizeof(double));
  CHECK(y == 2.5);
}

TEST_CASE("for_each_run of an empty region calls nothing", "[region]") {
  const Box g{{0, 0}, {3, 8}};
  CHECK(runs_of(Box{{1, 2}, {1, 8}}, g, g, 4).empty());
  CHECK(runs_in(g, g, g, 4, 10, 10).empty());
}

TEST_CASE("for_each_run matches an element-by-element copy on random boxes", "[region]") {
  std::mt19937 rng(20240611);
  for (int iter = 0; iter < 2000; ++iter) {
    const Case c = random_case(rng);
    INFO("r " << c.r.to_string() << " s " << c.s.to_string() << " d " << c.d.to_string() << " elem " << c.elem);
    const auto runs = runs_of(c.r, c.s, c.d, c.elem);
    CHECK(expand(runs) == brute_force(c.r, c.s, c.d, c.elem));
    for (size_t i = 0; i < runs.size(); ++i) {
      CHECK(runs[i][kLen] > 0);
      CHECK(runs[i][kLen] % static_cast<int64_t>(c.elem) == 0);
      if (i == 0) continue;
      // Increasing in both buffers, and maximal: no two neighbours are contiguous in both.
      CHECK(runs[i - 1][kSrc] + runs[i - 1][kLen] <= runs[i][kSrc]);
      CHECK(runs[i - 1][kDst] + runs[i - 1][kLen] <= runs[i][kDst]);
      CHECK_FALSE((runs[i - 1][kSrc] + runs[i - 1][kLen] == runs[i][kSrc] &&
                   runs[i - 1][kDst] + runs[i - 1][kLen] == runs[i][kDst]));
    }
  }
}

TEST_CASE("for_each_run_in gives exactly the bytes of the runs inside its window", "[region]") {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    const Case c = random_case(rng);
    const int64_t dsize = c.d.num_elements() * static_cast<int64_t>(c.elem);
    std::uniform_int_distribution<int64_t> pick(-2, dsize + 2);
    int64_t lo = pick(rng), hi = pick(rng);
    if (lo > hi) std::swap(lo, hi);
    INFO("r " << c.r.to_string() << " s " << c.s.to_string() << " d " << c.d.to_string() << " elem " << c.elem
              << " window [" << lo << ", " << hi << ")");
    std::map<int64_t, int64_t> expected;
    for (const auto& [dst, src] : expand(runs_of(c.r, c.s, c.d, c.elem)))
      if (dst >= lo && dst < hi) expected[dst] = src;
    const auto runs = runs_in(c.r, c.s, c.d, c.elem, lo, hi);
    CHECK(expand(runs) == expected);
    for (size_t i = 0; i < runs.size(); ++i) {
      CHECK(runs[i][kLen] > 0);
      CHECK(runs[i][kDst] >= lo);
      CHECK(runs[i][kDst] + runs[i][kLen] <= hi);
      if (i > 0) CHECK(runs[i - 1][kDst] + runs[i - 1][kLen] <= runs[i][kDst]);
    }
  }
}

TEST_CASE("copy_region matches an element-by-element copy and writes nothing else", "[region]") {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 1000; ++iter) {
    const Case c = random_case(rng);
    INFO("r " << c.r.to_string() << " s " << c.s.to_string() << " d " << c.d.to_string() << " elem " << c.elem);
    std::vector<unsigned char> src(c.s.num_elements() * c.elem), dst(c.d.num_elements() * c.elem, 0xee);
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    std::vector<unsigned char> expected = dst;
    for (const auto& [d, s] : brute_force(c.r, c.s, c.d, c.elem)) expected[d] = src[s];
    copy_region(c.r, src.data(), c.s, dst.data(), c.d, c.elem);
    CHECK(dst == expected);
  }
}
