// The padding of a destination slice, shared by ptc/plan.cc and ptc/cluster_plan.cc: the
// local positions along the slab dimension that no piece covers (ptc/plan.h).
#pragma once

#include <cstdint>

namespace ptcfs::ptc {

// Calls emit(lo, len) for each gap of [0, extent) between `pieces`, in increasing order.
// `pieces` (each with a local start `llo` and a global interval [glo, ghi) of the same
// length) are sorted by llo and disjoint; a piece may be empty.
template <class Pieces, class Emit>
void fill_gaps(const Pieces& pieces, int64_t extent, Emit&& emit) {
  int64_t at = 0;
  for (const auto& p : pieces) {
    if (p.llo > at) emit(at, p.llo - at);
    at = p.llo + (p.ghi - p.glo);
  }
  if (extent > at) emit(at, extent - at);
}

}  // namespace ptcfs::ptc
