// The set of byte ranges written into a file so far: adjacent and overlapping ranges merge,
// so writers of disjoint ranges (ZeRO, each DP rank its part) cost one entry per gap.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>

namespace ptcfs {

class ByteRanges {
 public:
  void add(uint64_t lo, uint64_t hi) {
    if (lo >= hi) return;
    auto it = ranges_.upper_bound(lo);
    if (it != ranges_.begin()) {
      auto prev = std::prev(it);
      if (prev->second >= lo) {
        lo = prev->first;
        hi = std::max(hi, prev->second);
        it = ranges_.erase(prev);
      }
    }
    while (it != ranges_.end() && it->first <= hi) {
      hi = std::max(hi, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace(lo, hi);
  }
  // True when [lo, hi) is written in full.
  bool covers(uint64_t lo, uint64_t hi) const {
    if (lo >= hi) return true;
    auto it = ranges_.upper_bound(lo);
    if (it == ranges_.begin()) return false;
    --it;
    return it->first <= lo && it->second >= hi;
  }
  // Bytes of [lo, hi) written.
  uint64_t covered(uint64_t lo, uint64_t hi) const {
    uint64_t n = 0;
    for (const auto& [a, b] : ranges_) {
      const uint64_t x = std::max(a, lo), y = std::min(b, hi);
      if (x < y) n += y - x;
    }
    return n;
  }
  // The end of the range written from byte 0 on (0 when byte 0 is not written).
  uint64_t prefix() const {
    auto it = ranges_.begin();
    return it != ranges_.end() && it->first == 0 ? it->second : 0;
  }
  uint64_t end() const { return ranges_.empty() ? 0 : ranges_.rbegin()->second; }
  void clear() { ranges_.clear(); }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // start -> end, disjoint, not adjacent
};

}  // namespace ptcfs
