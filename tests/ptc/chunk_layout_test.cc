#include "ptc/chunk_layout.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ptc/layout.h"

using namespace ptcfs;
using namespace ptcfs::ptc;

namespace {

Box box(std::vector<int64_t> lo, std::vector<int64_t> hi) { return Box{std::move(lo), std::move(hi)}; }

// The boxes DTensor's Shard(d) gives k ranks of a tensor of `shape`: ceil(N / k) each along d,
// the last ones shorter or empty (empty ones left out, as DCP leaves them out).
std::vector<Box> shard(const Shape& shape, int d, int k) {
  const int64_t n = shape[static_cast<size_t>(d)], c = (n + k - 1) / k;
  std::vector<Box> out;
  for (int r = 0; r < k; ++r) {
    Box b = Box::of_shape(shape);
    b.lo[static_cast<size_t>(d)] = std::min<int64_t>(r * c, n);
    b.hi[static_cast<size_t>(d)] = std::min<int64_t>((r + 1) * c, n);
    if (!b.empty()) out.push_back(b);
  }
  return out;
}

TensorSpec spec(const std::string& name, Shape shape, std::optional<int> tp_dim = {}, int64_t pad_to = 0) {
  TensorSpec s;
  s.name = name;
  s.dtype = DType::F32;
  s.shape = std::move(shape);
  s.tp_dim = tp_dim;
  s.pad_to = pad_to;
  return s;
}

}  // namespace

TEST_CASE("the split dimension of a tensor is where its chunks start at the most places", "[chunk_layout]") {
  CHECK(chunk_split_dim({10, 6}, shard({10, 6}, 0, 4)) == 0);
  CHECK(chunk_split_dim({10, 6}, shard({10, 6}, 1, 3)) == 1);
  CHECK(chunk_split_dim({10, 6}, {Box::of_shape({10, 6})}) == -1);  // one chunk: the whole tensor
  CHECK(chunk_split_dim({}, {Box::of_shape({})}) == -1);            // a scalar
  CHECK(chunk_split_dim({10, 6}, {}) == -1);
  // A 2 x 2 grid: two starts along each dimension; the lowest dimension wins the tie.
  const std::vector<Box> grid = {box({0, 0}, {4, 3}), box({0, 3}, {4, 6}), box({4, 0}, {8, 3}), box({4, 3}, {8, 6})};
  CHECK(chunk_split_dim({8, 6}, grid) == 0);
  // 2 x 3: dimension 1 has more starts.
  std::vector<Box> g23;
  for (int64_t i : {0, 4})
    for (int64_t j : {0, 2, 4}) g23.push_back(box({i, j}, {i + 4, j + 2}));
  CHECK(chunk_split_dim({8, 6}, g23) == 1);
}

TEST_CASE("a tensor split like its chunks pads to 1 and forgets fused parts and heads", "[chunk_layout]") {
  TensorSpec s = spec("w", {10, 6}, 1, 0);
  s.parts = 2;
  s.heads = 2;
  split_like_chunks(s, shard({10, 6}, 0, 4));
  CHECK(s.tp_dim == 0);
  CHECK(s.pad_to == 1);
  CHECK(s.parts == 1);
  CHECK(s.heads == 0);
  split_like_chunks(s, {Box::of_shape({10, 6})});
  CHECK_FALSE(s.tp_dim.has_value());
  CHECK(s.pad_to == 0);
}

TEST_CASE("slices are chunks exactly when every non-empty slice is one of them and none is left over",
          "[chunk_layout]") {
  const TensorSpec padded = spec("w", {10, 6}, 0, 1);
  CHECK(slices_are(padded, 4, shard({10, 6}, 0, 4)));  // 3, 3, 3, 1 rows
  CHECK(slices_are(padded, 2, shard({10, 6}, 0, 2)));
  CHECK_FALSE(slices_are(padded, 3, shard({10, 6}, 0, 4)));  // 4, 4, 2 rows
  CHECK_FALSE(slices_are(padded, 4, shard({10, 6}, 1, 4)));  // another dimension
  // Replicas repeat a box: still the same set.
  auto twice = shard({10, 6}, 0, 2);
  const auto once = twice;
  twice.insert(twice.end(), once.begin(), once.end());
  CHECK(slices_are(padded, 2, twice));
  // N = 5 over 4 ranks: 2, 2, 1 and an empty rank; tp 3 cuts the same chunks.
  const TensorSpec five = spec("v", {5}, 0, 1);
  CHECK(slices_are(five, 4, shard({5}, 0, 4)));
  CHECK(slices_are(five, 3, shard({5}, 0, 4)));
  CHECK_FALSE(slices_are(five, 2, shard({5}, 0, 4)));
  // Without padding a tp that does not divide the dimension is no layout at all.
  const TensorSpec even = spec("e", {10, 6}, 0);
  CHECK(slices_are(even, 2, shard({10, 6}, 0, 2)));
  CHECK_FALSE(slices_are(even, 4, shard({10, 6}, 0, 4)));
  // A replicated tensor: its slices are the whole tensor.
  const TensorSpec rep = spec("r", {6});
  CHECK(slices_are(rep, 3, {Box::of_shape({6})}));
  CHECK_FALSE(slices_are(rep, 3, shard({6}, 0, 2)));
  // Fused parts: a slice is two boxes, one chunk only at tp 1 (its parts tile it with one shift).
  TensorSpec fused = spec("f", {8, 4}, 0);
  fused.parts = 2;
  CHECK_FALSE(slices_are(fused, 2, shard({8, 4}, 0, 2)));
  CHECK(slices_are(fused, 1, {Box::of_shape({8, 4})}));
}

TEST_CASE("the tp of a set of chunks is the one whose slices are the chunks of the most bytes", "[chunk_layout]") {
  Ptc p;
  p.parallelism = {1, 1, 1};
  p.tensors = {spec("a", {10, 6}, 0, 1), spec("b", {8, 6}, 1, 1), spec("c", {5}, 0, 1), spec("n", {6})};
  // FSDP-style on 4 ranks (dim 0 of a and c) and tp 4 along dimension 1 of b? b's 6 columns over 4: 2, 2, 2, 0.
  std::vector<std::vector<Box>> boxes = {
      shard({10, 6}, 0, 4), shard({8, 6}, 1, 4), shard({5}, 0, 4), {Box::of_shape({6})}};
  CHECK(tp_for_chunks(p, boxes) == 4);
  // The same tensors over 2 ranks.
  boxes = {shard({10, 6}, 0, 2), shard({8, 6}, 1, 2), shard({5}, 0, 2), {Box::of_shape({6})}};
  CHECK(tp_for_chunks(p, boxes) == 2);
  // Mixed: a (240 bytes) over 2, b (192 bytes) over 4: a's bytes win.
  boxes = {shard({10, 6}, 0, 2), shard({8, 6}, 1, 4), {}, {}};
  CHECK(tp_for_chunks(p, boxes) == 2);
  // Only c, over 4 ranks: 3 and 4 cut the same chunks; the smaller tp is taken.
  boxes = {{}, {}, shard({5}, 0, 4), {}};
  CHECK(tp_for_chunks(p, boxes) == 3);
  // Nothing split: tp 1.
  boxes = {{Box::of_shape({10, 6})}, {}, {}, {Box::of_shape({6})}};
  CHECK(tp_for_chunks(p, boxes) == 1);
  CHECK(tp_for_chunks(p, {}) == 1);
}

TEST_CASE("a tp that some tensor refuses is never chosen", "[chunk_layout]") {
  Ptc p;
  p.parallelism = {1, 1, 1};
  TensorSpec h = spec("h", {8, 4}, 0);
  h.heads = 2;  // tp 4 would cut a head
  p.tensors = {h, spec("w", {8, 4}, 0, 1)};
  CHECK(tp_for_chunks(p, {{}, shard({8, 4}, 0, 4)}) == 1);
  CHECK(tp_for_chunks(p, {{}, shard({8, 4}, 0, 2)}) == 2);
}

TEST_CASE("a crafted chunk list cannot ask for a huge layout", "[chunk_layout]") {
  Ptc p;
  p.parallelism = {1, 1, 1};
  p.tensors = {spec("w", {100000}, 0, 1)};
  CHECK(tp_for_chunks(p, {shard({100000}, 0, 5000)}) == 1);  // more than kMaxChunkTp ranks
  CHECK(tp_for_chunks(p, {shard({100000}, 0, 1000)}) == 1000);
}

TEST_CASE("many tensors each suggesting another tp cost a bounded number of passes", "[chunk_layout]") {
  // 2,000 tensors of n = 3 + k % 900 elements, each cut after its first 2: each suggests tp 2
  // and its own largest tp, n - 1 (900 tps in all). Only kMaxChunkCandidates of them are weighed.
  Ptc p;
  p.parallelism = {1, 1, 1};
  std::vector<std::vector<Box>> boxes;
  for (int k = 0; k < 2000; ++k) {
    const int64_t n = 3 + k % 900;
    p.tensors.push_back(spec("t" + std::to_string(100000 + k), {n}, 0, 1));
    boxes.push_back({box({0}, {2}), box({2}, {n})});
  }
  // A tensor's chunks are slices only when n <= 4, and then at tp 2: the answer, found quickly.
  CHECK(tp_for_chunks(p, boxes) == 2);
}
