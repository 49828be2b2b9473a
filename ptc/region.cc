#include "ptc/region.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace ptcfs::ptc {

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (auto x : s) n *= x;
  return n;
}

std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Box Box::of_shape(const Shape& s) { return Box{std::vector<int64_t>(s.size(), 0), s}; }

Shape Box::extent() const {
  Shape e(rank());
  for (size_t i = 0; i < rank(); ++i) e[i] = hi[i] - lo[i];
  return e;
}

int64_t Box::num_elements() const {
  int64_t n = 1;
  for (size_t i = 0; i < rank(); ++i) n *= std::max<int64_t>(0, hi[i] - lo[i]);
  return n;
}

bool Box::contains(const Box& o) const {
  if (o.empty()) return true;
  if (o.rank() != rank()) return false;
  for (size_t i = 0; i < rank(); ++i)
    if (o.lo[i] < lo[i] || o.hi[i] > hi[i]) return false;
  return true;
}

Box Box::translated(const std::vector<int64_t>& by) const {
  Box b = *this;
  for (size_t i = 0; i < rank(); ++i) {
    b.lo[i] += by[i];
    b.hi[i] += by[i];
  }
  return b;
}

std::string Box::to_string() const {
  std::string out = "[";
  for (size_t i = 0; i < rank(); ++i) out += (i ? ", " : "") + std::to_string(lo[i]) + ":" + std::to_string(hi[i]);
  return out + ")";
}

Box intersect(const Box& a, const Box& b) {
  assert(a.rank() == b.rank());
  Box r = a;
  for (size_t i = 0; i < a.rank(); ++i) {
    r.lo[i] = std::max(a.lo[i], b.lo[i]);
    r.hi[i] = std::max(r.lo[i], std::min(a.hi[i], b.hi[i]));
  }
  return r;
}

namespace {

// The geometry of a region copy: outer dimensions [0, m) are iterated, dimensions [m, n)
// form one contiguous run of `len` bytes in both buffers.
struct RunGeometry {
  size_t m = 0;
  int64_t len = 0;
  int64_t count = 0;                      // number of runs
  std::vector<int64_t> ext;               // r's extent in the outer dims
  std::vector<int64_t> sstride, dstride;  // byte strides of the outer dims
  int64_t src0 = 0, dst0 = 0;             // offsets of r.lo

  RunGeometry(const Box& r, const Box& s, const Box& d, size_t elem) {
    const size_t n = r.rank();
    assert(s.contains(r) && d.contains(r));
    std::vector<int64_t> ss(n), ds(n);
    int64_t sacc = static_cast<int64_t>(elem), dacc = static_cast<int64_t>(elem);
    for (size_t j = n; j-- > 0;) {
      ss[j] = sacc;
      ds[j] = dacc;
      sacc *= s.hi[j] - s.lo[j];
      dacc *= d.hi[j] - d.lo[j];
      src0 += (r.lo[j] - s.lo[j]) * ss[j];
      dst0 += (r.lo[j] - d.lo[j]) * ds[j];
    }
    // Merge trailing dimensions while the inner one is covered fully in s, d and r.
    m = n;
    len = static_cast<int64_t>(elem);
    while (m > 0) {
      const size_t j = m - 1;
      const int64_t re = r.hi[j] - r.lo[j];
      len *= re;
      m = j;
      if (re != s.hi[j] - s.lo[j] || re != d.hi[j] - d.lo[j]) break;
    }
    ext.assign(r.lo.size() ? m : 0, 0);
    count = 1;
    for (size_t j = 0; j < m; ++j) {
      ext[j] = r.hi[j] - r.lo[j];
      count *= ext[j];
    }
    sstride.assign(ss.begin(), ss.begin() + m);
    dstride.assign(ds.begin(), ds.begin() + m);
    if (r.empty()) count = 0;
  }

  // Offsets of run k (0 <= k < count).
  void offsets(int64_t k, int64_t& src, int64_t& dst) const {
    src = src0;
    dst = dst0;
    for (size_t j = m; j-- > 0;) {
      const int64_t i = k % ext[j];
      k /= ext[j];
      src += i * sstride[j];
      dst += i * dstride[j];
    }
  }
};

}  // namespace

void for_each_run(const Box& r, const Box& s, const Box& d, size_t elem, const std::function<void(const Run&)>& fn) {
  for_each_run_in(r, s, d, elem, 0, INT64_MAX, fn);
}

void for_each_run_in(const Box& r, const Box& s, const Box& d, size_t elem, int64_t dst_lo, int64_t dst_hi,
                     const std::function<void(const Run&)>& fn) {
  if (r.empty() || dst_lo >= dst_hi) return;
  RunGeometry g(r, s, d, elem);
  // Destination offsets grow with k: find the first run ending after dst_lo.
  int64_t lo = 0, hi = g.count;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    int64_t so, dof;
    g.offsets(mid, so, dof);
    if (dof + g.len <= dst_lo)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo >= g.count) return;
  std::vector<int64_t> idx(g.m);
  {
    int64_t k = lo;
    for (size_t j = g.m; j-- > 0;) {
      idx[j] = k % g.ext[j];
      k /= g.ext[j];
    }
  }
  int64_t src, dst;
  g.offsets(lo, src, dst);
  for (int64_t k = lo; k < g.count; ++k) {
    if (dst >= dst_hi) break;
    const int64_t a = std::max(dst, dst_lo), b = std::min(dst + g.len, dst_hi);
    fn(Run{src + (a - dst), a, b - a});
    // Advance the odometer.
    for (size_t j = g.m; j-- > 0;) {
      src += g.sstride[j];
      dst += g.dstride[j];
      if (++idx[j] < g.ext[j]) break;
      src -= g.sstride[j] * g.ext[j];
      dst -= g.dstride[j] * g.ext[j];
      idx[j] = 0;
    }
  }
}

void copy_region(const Box& r, const void* src, const Box& s, void* dst, const Box& d, size_t elem) {
  auto* sb = static_cast<const std::byte*>(src);
  auto* db = static_cast<std::byte*>(dst);
  for_each_run(r, s, d, elem, [&](const Run& run) { std::memcpy(db + run.dst, sb + run.src, run.len); });
}

}  // namespace ptcfs::ptc
