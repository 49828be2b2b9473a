// Shapes and regions: the box algebra every slicing, overlap and copy in ptcfs is built on.
//
// A Box is a half-open N-d interval [lo, hi) per dimension, in element coordinates of some
// frame (a global tensor, or a local slice). A buffer "holding box B" stores the elements
// of B in C order (last dimension fastest), with no gaps.
//
// Copying a region R between buffers holding boxes S (source) and D (destination),
// R ⊆ S ∩ D, decomposes into runs: maximal byte ranges contiguous in both buffers. Trailing
// dimensions that R covers fully in both S and D merge into one run, so a copy of whole
// rows is one run and a copy of a column block is one run per row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ptcfs::ptc {

using Shape = std::vector<int64_t>;

// Product of the dimensions; 1 for a scalar (empty shape).
int64_t num_elements(const Shape& s);
// "[3, 4]"
std::string shape_string(const Shape& s);

struct Box {
  std::vector<int64_t> lo, hi;

  static Box of_shape(const Shape& s);  // [0, s)
  size_t rank() const { return lo.size(); }
  Shape extent() const;          // hi - lo
  int64_t num_elements() const;  // 0 when any extent is <= 0
  bool empty() const { return num_elements() == 0; }
  bool contains(const Box& o) const;  // o ⊆ *this (an empty o is contained)
  Box translated(const std::vector<int64_t>& by) const;
  bool operator==(const Box&) const = default;
  std::string to_string() const;  // "[0:4, 2:8)"
};

// The intersection; empty (lo == hi on some dimension) when they do not overlap.
Box intersect(const Box& a, const Box& b);

// One contiguous run of a region copy: `len` bytes at `src` in the source buffer and at
// `dst` in the destination buffer.
struct Run {
  int64_t src, dst, len;
};

// Calls fn for every run of copying region r (r ⊆ s, r ⊆ d) from a buffer holding s to a
// buffer holding d, elements of `elem` bytes, in increasing order of both src and dst.
void for_each_run(const Box& r, const Box& s, const Box& d, size_t elem, const std::function<void(const Run&)>& fn);

// Like for_each_run, but only the parts of runs whose destination bytes fall in
// [dst_lo, dst_hi); runs are clipped to that window. Skips directly to the first run that
// reaches the window, so a small read of a large region costs O(runs in the window).
void for_each_run_in(const Box& r, const Box& s, const Box& d, size_t elem, int64_t dst_lo, int64_t dst_hi,
                     const std::function<void(const Run&)>& fn);

// Copies region r from src (holding s) to dst (holding d).
void copy_region(const Box& r, const void* src, const Box& s, void* dst, const Box& d, size_t elem);

}  // namespace ptcfs::ptc
