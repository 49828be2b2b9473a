#include "ptc/chunk_layout.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "ptc/dtype.h"
#include "ptc/layout.h"

namespace ptcfs::ptc {

namespace {

bool box_less(const Box& a, const Box& b) { return a.lo != b.lo ? a.lo < b.lo : a.hi < b.hi; }

std::vector<Box> distinct(std::vector<Box> boxes) {
  std::sort(boxes.begin(), boxes.end(), box_less);
  boxes.erase(std::unique(boxes.begin(), boxes.end()), boxes.end());
  return boxes;
}

// The tps whose slices could be these boxes: their count, and for a pad_to 1 split also the
// largest tp that cuts the same chunks (ceil(N / tp) unchanged: the trailing ranks are empty);
// each weighed by the tensor's bytes.
void candidates_of(const TensorSpec& spec, const std::vector<Box>& boxes, std::map<int, uint64_t>& out) {
  if (!spec.tp_dim || boxes.empty()) return;
  const int d = *spec.tp_dim;
  const auto uniq = distinct(boxes);
  const uint64_t bytes = static_cast<uint64_t>(num_elements(spec.shape)) * dtype_size(spec.dtype);
  out[static_cast<int>(std::min<size_t>(uniq.size(), kMaxChunkTp + 1))] += bytes;
  const int64_t n = spec.shape[static_cast<size_t>(d)];
  const int64_t c = uniq.front().hi[static_cast<size_t>(d)] - uniq.front().lo[static_cast<size_t>(d)];
  if (spec.pad_to == 1 && c > 1) out[static_cast<int>(std::min<int64_t>((n - 1) / (c - 1), kMaxChunkTp + 1))] += bytes;
}

// The box of the tensor a slice holds when its pieces tile it with one shift (one piece, or
// fused parts at tp 1); nullopt otherwise, or when it holds nothing.
std::optional<Box> one_box(const Slice& sl) {
  if (sl.pieces.empty()) return std::nullopt;
  const auto& first = sl.pieces.front();
  Box out = first.global;
  int64_t covered = 0;
  for (const auto& pc : sl.pieces) {
    for (size_t d = 0; d < pc.local.lo.size(); ++d) {
      if (pc.global.lo[d] - pc.local.lo[d] != first.global.lo[d] - first.local.lo[d]) return std::nullopt;
      out.lo[d] = std::min(out.lo[d], pc.global.lo[d]);
      out.hi[d] = std::max(out.hi[d], pc.global.hi[d]);
    }
    covered += pc.local.num_elements();
  }
  if (covered != out.num_elements()) return std::nullopt;
  return out;
}

// Whether every tensor of `ptc` has a valid slice at `tp` (heads and divisibility).
bool valid_tp(const Ptc& ptc, int tp) {
  for (size_t i = 0; i < ptc.tensors.size(); ++i)
    if (ptc.tensors[i].tp_dim && !slice_of(ptc.tensors[i], i, tp, 0)) return false;
  return true;
}

}  // namespace

int chunk_split_dim(const Shape& shape, const std::vector<Box>& boxes) {
  const Box whole = Box::of_shape(shape);
  if (shape.empty() || boxes.empty()) return -1;
  for (const auto& b : boxes)
    if (b == whole) return -1;
  int best = -1;
  size_t most = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    std::set<int64_t> starts;
    for (const auto& b : boxes)
      if (b.lo.size() == shape.size()) starts.insert(b.lo[d]);
    if (starts.size() > most) {
      most = starts.size();
      best = static_cast<int>(d);
    }
  }
  return best;
}

void split_like_chunks(TensorSpec& spec, const std::vector<Box>& boxes) {
  const int d = chunk_split_dim(spec.shape, boxes);
  spec.parts = 1;
  spec.heads = 0;
  if (d < 0) {
    spec.tp_dim.reset();
    spec.pad_to = 0;
    return;
  }
  spec.tp_dim = d;
  spec.pad_to = 1;
}

bool slices_are(const TensorSpec& spec, int tp, const std::vector<Box>& boxes) {
  if (tp < 1) return false;
  const auto want = distinct(boxes);
  if (!spec.tp_dim) return want.size() == 1 && want.front() == Box::of_shape(spec.shape);
  if (want.size() > static_cast<size_t>(tp)) return false;
  if (spec.pad_to == 1 && spec.parts == 1) {  // the count of non-empty slices first: no slice is built for a miss
    const int64_t n = spec.shape[static_cast<size_t>(*spec.tp_dim)];
    const int64_t c = (n + tp - 1) / tp;
    if (c == 0 || static_cast<size_t>((n + c - 1) / c) != want.size()) return false;
  }
  std::vector<Box> have;
  for (int t = 0; t < tp; ++t) {
    auto sl = slice_of(spec, 0, tp, t);
    if (!sl) return false;
    if (sl->pieces.empty()) continue;  // all padding
    const auto b = one_box(*sl);
    if (!b) return false;  // fused parts split over TP: no slice is one box
    have.push_back(*b);
  }
  return distinct(std::move(have)) == want;
}

int tp_for_chunks(const Ptc& ptc, const std::vector<std::vector<Box>>& boxes) {
  std::map<int, uint64_t> weight;
  for (size_t i = 0; i < ptc.tensors.size() && i < boxes.size(); ++i) candidates_of(ptc.tensors[i], boxes[i], weight);
  // The kMaxChunkCandidates tps the most bytes suggest, and 1: a crafted list of many tensors,
  // each suggesting another tp, costs no more than that many passes.
  std::vector<std::pair<uint64_t, int>> by_weight;
  for (const auto& [tp, w] : weight) by_weight.emplace_back(w, -tp);
  std::sort(by_weight.rbegin(), by_weight.rend());
  std::set<int> cands{1};
  for (size_t k = 0; k < by_weight.size() && k < kMaxChunkCandidates; ++k) cands.insert(-by_weight[k].second);
  const uint64_t tensors = std::max<uint64_t>(ptc.tensors.size(), 1);
  int best = 1;
  uint64_t best_bytes = 0;
  bool first = true;
  for (int tp : cands) {
    if (tp > kMaxChunkTp || static_cast<uint64_t>(tp) * tensors > kMaxChunkSlices || !valid_tp(ptc, tp)) continue;
    uint64_t bytes = 0;
    for (size_t i = 0; i < ptc.tensors.size() && i < boxes.size(); ++i) {
      const auto& spec = ptc.tensors[i];
      if (!boxes[i].empty() && slices_are(spec, tp, boxes[i]))
        bytes += static_cast<uint64_t>(num_elements(spec.shape)) * dtype_size(spec.dtype);
    }
    if (first || bytes > best_bytes) {  // candidates ascend: a tie keeps the smaller tp
      best = tp;
      best_bytes = bytes;
      first = false;
    }
  }
  return best;
}

}  // namespace ptcfs::ptc
