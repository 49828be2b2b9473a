#include "ptc/layout.h"

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

using namespace ptcfs;
using namespace ptcfs::ptc;

namespace {

Ptc parse_or_die(const std::string& text) {
  auto r = parse_ptc_json(text, "ptc.json");
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  return *r;
}

// A PTC with one tensor `w` whose JSON object is `body`, tp=1 pp=1 dp=1, `layers` layers.
Ptc one_tensor(const std::string& body, int layers = 0) {
  return parse_or_die(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": )" + std::to_string(layers) +
                      R"(, "tensors": {"w": )" + body + "}}");
}

Layout layout_or_die(const Ptc& p, Parallelism par) {
  auto r = Layout::make(p, par);
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  return *r;
}

Box box(std::vector<int64_t> lo, std::vector<int64_t> hi) { return Box{std::move(lo), std::move(hi)}; }

// The single slice of tensor 0 held by (t, 0).
const Slice& slice0(const Layout& l, int t) {
  const auto& v = l.slices(ShardId{t, 0});
  REQUIRE(v.size() == 1);
  return v[0];
}

// Expects layout.make to fail with kInvalidArgument, the message holding every needle.
void expect_make_fails(const Ptc& p, Parallelism par, std::initializer_list<std::string> needles) {
  auto r = Layout::make(p, par);
  REQUIRE_FALSE(r.is_ok());
  INFO("message: " << r.status().message());
  CHECK(r.status().code() == Code::kInvalidArgument);
  for (const auto& n : needles) CHECK_THAT(r.status().message(), Catch::Contains(n));
}

// Visits every element index of a box.
template <class Fn>
void for_each_element(const Box& b, Fn&& fn) {
  if (b.empty()) return;
  std::vector<int64_t> idx = b.lo;
  while (true) {
    fn(idx);
    size_t d = idx.size();
    while (d > 0) {
      --d;
      if (++idx[d] < b.hi[d]) break;
      idx[d] = b.lo[d];
      if (d == 0) return;
    }
    if (idx.empty()) return;  // scalar: one element
  }
}

int64_t flat_index(const Shape& shape, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

// Checks that the pieces of `slices` (all of one tensor) cover its global box exactly once,
// lie inside their local shapes and do not overlap locally.
void check_tiles(const Layout& l, size_t ti, const std::vector<const Slice*>& slices) {
  const TensorSpec& spec = l.ptc().tensors[ti];
  INFO("tensor " << spec.name << " shape " << shape_string(spec.shape));
  std::vector<int> count(static_cast<size_t>(num_elements(spec.shape)), 0);
  for (const Slice* s : slices) {
    REQUIRE(s->tensor == ti);
    std::vector<int> local(static_cast<size_t>(num_elements(s->local_shape)), 0);
    for (const Piece& pc : s->pieces) {
      CHECK(pc.local.extent() == pc.global.extent());
      CHECK(Box::of_shape(s->local_shape).contains(pc.local));
      CHECK(Box::of_shape(spec.shape).contains(pc.global));
      CHECK_FALSE(pc.local.empty());
      for_each_element(pc.global, [&](const std::vector<int64_t>& i) { ++count[flat_index(spec.shape, i)]; });
      for_each_element(pc.local, [&](const std::vector<int64_t>& i) { ++local[flat_index(s->local_shape, i)]; });
    }
    for (int c : local) REQUIRE(c <= 1);
  }
  for (size_t i = 0; i < count.size(); ++i) {
    INFO("element " << i);
    REQUIRE(count[i] == 1);
  }
}

}  // namespace

TEST_CASE("a replicated tensor is held whole by every TP rank", "[layout]") {
  const Ptc p = one_tensor(R"({"dtype": "F32", "shape": [3, 4]})");
  const Layout l = layout_or_die(p, {2, 1, 1});
  for (int t = 0; t < 2; ++t) {
    const Slice& s = slice0(l, t);
    CHECK(s.tensor == 0);
    CHECK(s.local_shape == Shape{3, 4});
    REQUIRE(s.pieces.size() == 1);
    CHECK(s.pieces[0].local == box({0, 0}, {3, 4}));
    CHECK(s.pieces[0].global == box({0, 0}, {3, 4}));
    CHECK(l.bytes(s) == 48);
  }
  // Covered by TP rank 0 alone.
  const auto cov = l.covering(0);
  REQUIRE(cov.size() == 1);
  CHECK(cov[0].first == ShardId{0, 0});
  CHECK(cov[0].second == 0);
}

TEST_CASE("a scalar is replicated as one element", "[layout]") {
  const Layout l = layout_or_die(one_tensor(R"({"dtype": "I64", "shape": []})"), {2, 1, 1});
  const Slice& s = slice0(l, 1);
  CHECK(s.local_shape == Shape{});
  REQUIRE(s.pieces.size() == 1);
  CHECK(s.pieces[0].local == box({}, {}));
  CHECK(l.bytes(s) == 8);
}

TEST_CASE("tp_dim 0 splits rows evenly over TP ranks", "[layout]") {
  const Layout l = layout_or_die(one_tensor(R"({"dtype": "BF16", "shape": [8, 4], "tp_dim": 0})"), {2, 1, 1});
  for (int t = 0; t < 2; ++t) {
    const Slice& s = slice0(l, t);
    CHECK(s.local_shape == Shape{4, 4});
    REQUIRE(s.pieces.size() == 1);
    CHECK(s.pieces[0].local == box({0, 0}, {4, 4}));
    CHECK(s.pieces[0].global == box({4 * t, 0}, {4 * t + 4, 4}));
    CHECK(l.bytes(s) == 32);
  }
  const auto cov = l.covering(0);
  REQUIRE(cov.size() == 2);
  CHECK(cov[0].first == ShardId{0, 0});
  CHECK(cov[1].first == ShardId{1, 0});
}

TEST_CASE("tp_dim 1 splits columns evenly over TP ranks", "[layout]") {
  const Layout l = layout_or_die(one_tensor(R"({"dtype": "F32", "shape": [3, 8], "tp_dim": 1})"), {4, 1, 1});
  for (int t = 0; t < 4; ++t) {
    const Slice& s = slice0(l, t);
    CHECK(s.local_shape == Shape{3, 2});
    REQUIRE(s.pieces.size() == 1);
    CHECK(s.pieces[0].local == box({0, 0}, {3, 2}));
    CHECK(s.pieces[0].global == box({0, 2 * t}, {3, 2 * t + 2}));
  }
}

TEST_CASE("parts: 2 at tp=2 splits each fused part on its own and concatenates the chunks", "[layout]") {
  // 8 rows: part size q = 4, chunk c = 2.
  const Layout l =
      layout_or_die(one_tensor(R"({"dtype": "F16", "shape": [8, 3], "tp_dim": 0, "parts": 2})"), {2, 1, 1});
  const Slice& s0 = slice0(l, 0);
  CHECK(s0.local_shape == Shape{4, 3});
  REQUIRE(s0.pieces.size() == 2);
  CHECK(s0.pieces[0].local == box({0, 0}, {2, 3}));
  CHECK(s0.pieces[0].global == box({0, 0}, {2, 3}));
  CHECK(s0.pieces[1].local == box({2, 0}, {4, 3}));
  CHECK(s0.pieces[1].global == box({4, 0}, {6, 3}));

  const Slice& s1 = slice0(l, 1);
  CHECK(s1.local_shape == Shape{4, 3});
  REQUIRE(s1.pieces.size() == 2);
  CHECK(s1.pieces[0].local == box({0, 0}, {2, 3}));
  CHECK(s1.pieces[0].global == box({2, 0}, {4, 3}));
  CHECK(s1.pieces[1].local == box({2, 0}, {4, 3}));
  CHECK(s1.pieces[1].global == box({6, 0}, {8, 3}));
}

TEST_CASE("parts: 3 along tp_dim 1 at tp=2 maps each local chunk to its part", "[layout]") {
  // 12 columns: q = 4, c = 2.
  const Layout l =
      layout_or_die(one_tensor(R"({"dtype": "F32", "shape": [2, 12], "tp_dim": 1, "parts": 3})"), {2, 1, 1});
  const Slice& s1 = slice0(l, 1);
  CHECK(s1.local_shape == Shape{2, 6});
  REQUIRE(s1.pieces.size() == 3);
  for (int j = 0; j < 3; ++j) {
    CHECK(s1.pieces[j].local == box({0, 2 * j}, {2, 2 * j + 2}));
    CHECK(s1.pieces[j].global == box({0, 4 * j + 2}, {2, 4 * j + 4}));
  }
}

TEST_CASE("pad_to pads the vocabulary to a multiple of pad_to*tp and the padding has no piece", "[layout]") {
  // 1000 rows, pad_to 128, tp=2: padded 1024, chunk 512.
  const Layout l =
      layout_or_die(one_tensor(R"({"dtype": "BF16", "shape": [1000, 16], "tp_dim": 0, "pad_to": 128})"), {2, 1, 1});
  const Slice& s0 = slice0(l, 0);
  CHECK(s0.local_shape == Shape{512, 16});
  REQUIRE(s0.pieces.size() == 1);
  CHECK(s0.pieces[0].local == box({0, 0}, {512, 16}));
  CHECK(s0.pieces[0].global == box({0, 0}, {512, 16}));
  CHECK(l.bytes(s0) == 512 * 16 * 2);

  const Slice& s1 = slice0(l, 1);
  CHECK(s1.local_shape == Shape{512, 16});
  REQUIRE(s1.pieces.size() == 1);
  CHECK(s1.pieces[0].local == box({0, 0}, {488, 16}));  // local rows 488..511 are padding
  CHECK(s1.pieces[0].global == box({512, 0}, {1000, 16}));
  CHECK(l.bytes(s1) == 512 * 16 * 2);  // stored slices include the padding
}

TEST_CASE("pad_to with more padding than a chunk leaves whole ranks as padding", "[layout]") {
  // 10 rows, pad_to 8, tp=4: padded 32, chunk 8. Rank 0 holds [0,8), rank 1 [8,10) in
  // local [0,2), ranks 2 and 3 hold only padding.
  const Layout l =
      layout_or_die(one_tensor(R"({"dtype": "F32", "shape": [10, 2], "tp_dim": 0, "pad_to": 8})"), {4, 1, 1});
  for (int t = 0; t < 4; ++t) CHECK(slice0(l, t).local_shape == Shape{8, 2});
  REQUIRE(slice0(l, 0).pieces.size() == 1);
  CHECK(slice0(l, 0).pieces[0].local == box({0, 0}, {8, 2}));
  CHECK(slice0(l, 0).pieces[0].global == box({0, 0}, {8, 2}));
  REQUIRE(slice0(l, 1).pieces.size() == 1);
  CHECK(slice0(l, 1).pieces[0].local == box({0, 0}, {2, 2}));
  CHECK(slice0(l, 1).pieces[0].global == box({8, 0}, {10, 2}));
  CHECK(slice0(l, 2).pieces.empty());
  CHECK(slice0(l, 3).pieces.empty());
  CHECK(l.bytes(slice0(l, 3)) == 8 * 2 * 4);
}

TEST_CASE("pad_to adds nothing when the size is already a multiple of pad_to*tp", "[layout]") {
  const Layout l =
      layout_or_die(one_tensor(R"({"dtype": "F32", "shape": [4, 512], "tp_dim": 1, "pad_to": 128})"), {2, 1, 1});
  const Slice& s1 = slice0(l, 1);
  CHECK(s1.local_shape == Shape{4, 256});
  REQUIRE(s1.pieces.size() == 1);
  CHECK(s1.pieces[0].local == box({0, 0}, {4, 256}));
  CHECK(s1.pieces[0].global == box({0, 256}, {4, 512}));
}

TEST_CASE("pad_to accepts a tp that does not divide the logical size", "[layout]") {
  // 50257 rows (the GPT-2 vocabulary), pad_to 128, tp=4: padded 50688, chunk 12672.
  const Layout l =
      layout_or_die(one_tensor(R"({"dtype": "BF16", "shape": [50257, 8], "tp_dim": 0, "pad_to": 128})"), {4, 1, 1});
  const Slice& s3 = slice0(l, 3);
  CHECK(s3.local_shape == Shape{12672, 8});
  REQUIRE(s3.pieces.size() == 1);
  CHECK(s3.pieces[0].local == box({0, 0}, {50257 - 3 * 12672, 8}));
  CHECK(s3.pieces[0].global == box({3 * 12672, 0}, {50257, 8}));
}

namespace {
// The stage of each layer's tensor, for L layers over pp stages.
std::vector<int> stage_of_layers(int L, int pp) {
  std::string tensors;
  for (int i = 0; i < L; ++i)
    tensors += (i ? ", " : "") + std::string("\"layers.") + std::to_string(i) +
               R"(.w": {"dtype": "F32", "shape": [2], "layer": )" + std::to_string(i) + "}";
  const Ptc p = parse_or_die(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": )" + std::to_string(L) +
                             R"(, "tensors": {)" + tensors + "}}");
  const Layout l = layout_or_die(p, {1, pp, 1});
  std::vector<int> out(static_cast<size_t>(L), -1);
  for (const auto& t : l.ptc().tensors) {
    const auto st = l.stages_of(t);
    REQUIRE(st.size() == 1);
    out[static_cast<size_t>(t.placement.layer)] = st[0];
    // The shard of that stage holds the tensor, no other does.
    for (int s = 0; s < pp; ++s) {
      const size_t ti = static_cast<size_t>(&t - l.ptc().tensors.data());
      CHECK((l.find_slice(ShardId{0, s}, ti) >= 0) == (s == st[0]));
    }
  }
  return out;
}
}  // namespace

TEST_CASE("layers go to stages in contiguous groups, earlier stages taking the remainder", "[layout]") {
  CHECK(stage_of_layers(5, 2) == std::vector<int>{0, 0, 0, 1, 1});
  CHECK(stage_of_layers(4, 4) == std::vector<int>{0, 1, 2, 3});
  CHECK(stage_of_layers(7, 3) == std::vector<int>{0, 0, 0, 1, 1, 2, 2});
  CHECK(stage_of_layers(8, 3) == std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2});
  CHECK(stage_of_layers(4, 1) == std::vector<int>{0, 0, 0, 0});
  CHECK(stage_of_layers(6, 2) == std::vector<int>{0, 0, 0, 1, 1, 1});
}

TEST_CASE("stage first, last, all and a list place a tensor on those stages", "[layout]") {
  const Ptc p = parse_or_die(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 3, "tensors": {
      "a_first": {"dtype": "F32", "shape": [1], "stage": "first"},
      "b_default": {"dtype": "F32", "shape": [1]},
      "c_last": {"dtype": "F32", "shape": [1], "stage": "last"},
      "d_all": {"dtype": "F32", "shape": [1], "stage": "all"},
      "e_list": {"dtype": "F32", "shape": [1], "stage": [2, 0]}}})");
  const Layout l = layout_or_die(p, {2, 3, 1});
  const auto& ts = l.ptc().tensors;
  CHECK(l.stages_of(ts[0]) == std::vector<int>{0});
  CHECK(l.stages_of(ts[1]) == std::vector<int>{0});
  CHECK(l.stages_of(ts[2]) == std::vector<int>{2});
  CHECK(l.stages_of(ts[3]) == std::vector<int>{0, 1, 2});
  CHECK(l.stages_of(ts[4]) == std::vector<int>{0, 2});

  auto names = [&](ShardId s) {
    std::vector<std::string> out;
    for (const auto& sl : l.slices(s)) out.push_back(l.tensor(sl).name);
    return out;
  };
  for (int t = 0; t < 2; ++t) {
    CHECK(names({t, 0}) == std::vector<std::string>{"a_first", "b_default", "d_all", "e_list"});
    CHECK(names({t, 1}) == std::vector<std::string>{"d_all"});
    CHECK(names({t, 2}) == std::vector<std::string>{"c_last", "d_all", "e_list"});
  }
  CHECK(l.find_slice({1, 2}, 0) == -1);
  CHECK(l.find_slice({1, 2}, 2) == 0);
  CHECK(l.find_slice({1, 2}, 4) == 2);
  // The covering of a list placement is at its first stage.
  const auto cov = l.covering(4);
  REQUIRE(cov.size() == 1);
  CHECK(cov[0].first == ShardId{0, 0});
  CHECK(cov[0].second == 3);
  // "last" and "all" with pp=1 are stage 0.
  const Ptc q = parse_or_die(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "tensors": {
      "c_last": {"dtype": "F32", "shape": [1], "stage": "last"},
      "d_all": {"dtype": "F32", "shape": [1], "stage": "all"}}})");
  const Layout l1 = layout_or_die(q, {1, 1, 1});
  CHECK(l1.stages_of(l1.ptc().tensors[0]) == std::vector<int>{0});
  CHECK(l1.stages_of(l1.ptc().tensors[1]) == std::vector<int>{0});
}

TEST_CASE("Layout::make refuses a tp that does not divide a split dimension and names the tensor", "[layout]") {
  expect_make_fails(one_tensor(R"({"dtype": "F32", "shape": [8, 4], "tp_dim": 0})"), {3, 1, 1},
                    {"tensor 'w'", "dimension 0 size 8 is not divisible by tp=3"});
  expect_make_fails(one_tensor(R"({"dtype": "F32", "shape": [4, 6], "tp_dim": 1})"), {4, 1, 1},
                    {"tensor 'w'", "dimension 1 size 6 is not divisible by tp=4"});
  // 12 rows divide by 4, but each part of 6 rows does not.
  expect_make_fails(one_tensor(R"({"dtype": "F32", "shape": [12, 4], "tp_dim": 0, "parts": 2})"), {4, 1, 1},
                    {"tensor 'w'", "part size 6 is not divisible by tp=4"});
  CHECK(Layout::make(one_tensor(R"({"dtype": "F32", "shape": [12, 4], "tp_dim": 0, "parts": 2})"), {3, 1, 1}).is_ok());
}

TEST_CASE("Layout::make refuses a tp that does not divide a tensor's heads, naming the tensor and the count",
          "[layout]") {
  // 2 key/value heads of 64 rows: tp=4 divides the 128 rows, but each rank would hold half a head.
  const Ptc kv = one_tensor(R"({"dtype": "BF16", "shape": [128, 512], "tp_dim": 0, "heads": 2})");
  expect_make_fails(kv, {4, 1, 1}, {"tensor 'w': dimension 0 holds 2 heads, which tp=4 does not divide"});
  expect_make_fails(kv, {8, 1, 1}, {"tensor 'w': dimension 0 holds 2 heads, which tp=8 does not divide"});
  const Layout two = layout_or_die(kv, {2, 1, 1});
  CHECK(slice0(two, 1).local_shape == Shape{64, 512});
  CHECK(slice0(two, 1).pieces[0].global == box({64, 0}, {128, 512}));
  CHECK(Layout::make(kv, {1, 1, 1}).is_ok());
  // With parts, the count is per part: 3 parts of 4 heads take tp=4 but not tp=8 (each part
  // still has 8 rows of 16 per tp rank: the sizes alone would pass).
  const Ptc fused = one_tensor(R"({"dtype": "F32", "shape": [384, 8], "tp_dim": 0, "parts": 3, "heads": 4})");
  CHECK(Layout::make(fused, {4, 1, 1}).is_ok());
  expect_make_fails(fused, {8, 1, 1}, {"tensor 'w': dimension 0 holds 4 heads per part, which tp=8 does not divide"});
  // Along columns (an attention output projection).
  expect_make_fails(one_tensor(R"({"dtype": "F32", "shape": [8, 96], "tp_dim": 1, "heads": 6})"), {4, 1, 1},
                    {"dimension 1 holds 6 heads, which tp=4 does not divide"});
  CHECK(slice_of(kv.tensors[0], 0, 4, 0).status().message() ==
        "tensor 'w': dimension 0 holds 2 heads, which tp=4 does not divide (a rank would hold part of a head)");
}

TEST_CASE("Layout::make refuses more stages than layers, stage lists past pp and degrees below 1", "[layout]") {
  const Ptc two_layers = one_tensor(R"({"dtype": "F32", "shape": [4], "layer": 1})", 2);
  expect_make_fails(two_layers, {1, 3, 1}, {"config tp=1,pp=3,dp=1", "more pipeline stages (3) than layers (2)"});
  CHECK(Layout::make(two_layers, {1, 2, 1}).is_ok());

  const Ptc listed = one_tensor(R"({"dtype": "F32", "shape": [4], "stage": [0, 2]})");
  expect_make_fails(listed, {1, 2, 1}, {"tensor 'w'", "placed on stage 2 but there are only 2 stages"});
  CHECK(Layout::make(listed, {1, 3, 1}).is_ok());

  const Ptc plain = one_tensor(R"({"dtype": "F32", "shape": [4]})");
  expect_make_fails(plain, {0, 1, 1}, {"every degree must be at least 1"});
  expect_make_fails(plain, {1, 0, 1}, {"every degree must be at least 1"});
  expect_make_fails(plain, {1, 1, 0}, {"every degree must be at least 1"});
  expect_make_fails(plain, {1, 1, -2}, {"every degree must be at least 1"});
  // Without layers, pp is not bounded by num_layers.
  CHECK(Layout::make(plain, {1, 5, 1}).is_ok());
}

TEST_CASE("Layout::make stores the new parallelism, dp included", "[layout]") {
  const Ptc p = one_tensor(R"({"dtype": "F32", "shape": [4]})");
  const Layout l = layout_or_die(p, {2, 1, 7});
  CHECK(l.parallelism() == Parallelism{2, 1, 7});
  CHECK(l.ptc().parallelism == Parallelism{2, 1, 7});
  CHECK(l.shards().size() == 2);  // DP replicas are not separate shards
}

TEST_CASE("shards are ordered pipeline stage major, TP rank minor", "[layout]") {
  const Layout l = layout_or_die(one_tensor(R"({"dtype": "F32", "shape": [4], "stage": "all"})"), {2, 3, 2});
  const std::vector<ShardId> want = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}};
  CHECK(l.shards() == want);
  std::vector<std::string> names;
  for (const auto& s : l.shards()) names.push_back(s.name());
  CHECK(names == std::vector<std::string>{"tp0-pp0", "tp1-pp0", "tp0-pp1", "tp1-pp1", "tp0-pp2", "tp1-pp2"});
  CHECK(ShardId{12, 345}.name() == "tp12-pp345");
}

TEST_CASE("the slices of every shard are sorted by tensor name", "[layout]") {
  const Ptc p = parse_or_die(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 2, "tensors": {
      "z": {"dtype": "F32", "shape": [4], "stage": "all"},
      "layers.1.b": {"dtype": "F32", "shape": [4, 2], "tp_dim": 0, "layer": 1},
      "layers.0.a": {"dtype": "F32", "shape": [4], "layer": 0},
      "A": {"dtype": "F32", "shape": [4], "stage": "all"},
      "layers.1.a": {"dtype": "F32", "shape": [4], "layer": 1},
      "emb": {"dtype": "F32", "shape": [4]}}})");
  const Layout l = layout_or_die(p, {2, 2, 1});
  auto names = [&](ShardId s) {
    std::vector<std::string> out;
    for (const auto& sl : l.slices(s)) out.push_back(l.tensor(sl).name);
    return out;
  };
  for (int t = 0; t < 2; ++t) {
    CHECK(names({t, 0}) == std::vector<std::string>{"A", "emb", "layers.0.a", "z"});
    CHECK(names({t, 1}) == std::vector<std::string>{"A", "layers.1.a", "layers.1.b", "z"});
  }
}

TEST_CASE("slice_of matches the layout's slices", "[layout]") {
  const Ptc p = one_tensor(R"({"dtype": "F32", "shape": [6, 4], "tp_dim": 0, "parts": 3})");
  const Layout l = layout_or_die(p, {2, 1, 1});
  auto s = slice_of(p.tensors[0], 7, 2, 1);
  REQUIRE(s.is_ok());
  CHECK(s->tensor == 7);
  CHECK(s->local_shape == slice0(l, 1).local_shape);
  REQUIRE(s->pieces.size() == 3);
  for (size_t j = 0; j < 3; ++j) {
    CHECK(s->pieces[j].local == slice0(l, 1).pieces[j].local);
    CHECK(s->pieces[j].global == slice0(l, 1).pieces[j].global);
  }
  auto bad = slice_of(p.tensors[0], 0, 4, 0);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().code() == Code::kInvalidArgument);
}

TEST_CASE("covering tiles every tensor exactly once, and so do the TP ranks of every holding stage", "[layout]") {
  std::mt19937 rng(20240517);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const char* dtypes[] = {"F32", "BF16", "U8", "I64"};
  int layouts_checked = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int tp = pick(1, 4), pp = pick(1, 3), layers = pp + pick(0, 3);
    std::string tensors;
    const int n = pick(1, 6);
    for (int i = 0; i < n; ++i) {
      const int rank = pick(0, 3);
      const int mode = rank == 0 ? 0 : pick(0, 3);  // 0 replicated, 1 split, 2 parts, 3 pad_to
      const int k = rank == 0 ? 0 : pick(0, rank - 1);
      const int parts = pick(1, 3);
      std::string shape;
      for (int d = 0; d < rank; ++d) {
        int64_t size = pick(1, 5);
        if (d == k && mode == 1) size = static_cast<int64_t>(tp) * pick(0, 3);
        if (d == k && mode == 2) size = static_cast<int64_t>(tp) * parts * pick(0, 2);
        if (d == k && mode == 3) size = pick(1, 23);
        shape += (d ? ", " : "") + std::to_string(size);
      }
      std::string t = std::string(R"({"dtype": ")") + dtypes[pick(0, 3)] + R"(", "shape": [)" + shape + "]";
      if (mode >= 1) t += R"(, "tp_dim": )" + std::to_string(k);
      if (mode == 2) t += R"(, "parts": )" + std::to_string(parts);
      if (mode == 3) t += R"(, "pad_to": )" + std::to_string(pick(1, 5));
      switch (pick(0, 4)) {
        case 0:
          t += R"(, "layer": )" + std::to_string(pick(0, layers - 1));
          break;
        case 1:
          t += R"(, "stage": "last")";
          break;
        case 2:
          t += R"(, "stage": "all")";
          break;
        case 3:
          t += R"(, "stage": [)" + std::to_string(pick(0, pp - 1)) + "]";
          break;
        default:
          break;
      }
      tensors += (i ? ", " : "") + std::string("\"t") + std::to_string(i) + "\": " + t + "}";
    }
    const std::string text = R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": )" + std::to_string(layers) +
                             R"(, "tensors": {)" + tensors + "}}";
    INFO("ptc.json: " << text << " at tp=" << tp << " pp=" << pp);
    const Ptc p = parse_or_die(text);
    const Layout l = layout_or_die(p, {tp, pp, 1});
    ++layouts_checked;
    for (size_t ti = 0; ti < p.tensors.size(); ++ti) {
      const TensorSpec& spec = p.tensors[ti];
      // covering(): the first holding stage, all TP ranks for split tensors, rank 0 otherwise.
      const auto cov = l.covering(ti);
      const int first_stage = l.stages_of(spec).front();
      REQUIRE(cov.size() == static_cast<size_t>(spec.tp_dim ? tp : 1));
      std::vector<const Slice*> slices;
      for (size_t i = 0; i < cov.size(); ++i) {
        CHECK(cov[i].first == ShardId{static_cast<int>(i), first_stage});
        slices.push_back(&l.slices(cov[i].first)[cov[i].second]);
      }
      check_tiles(l, ti, slices);
      // Every stage that holds a split tensor holds a full copy across its TP ranks.
      if (spec.tp_dim) {
        for (int s : l.stages_of(spec)) {
          std::vector<const Slice*> at_stage;
          for (int t = 0; t < tp; ++t) {
            const int i = l.find_slice({t, s}, ti);
            REQUIRE(i >= 0);
            at_stage.push_back(&l.slices({t, s})[static_cast<size_t>(i)]);
          }
          check_tiles(l, ti, at_stage);
        }
      }
    }
  }
  CHECK(layouts_checked == 200);
}

TEST_CASE("parse_shard_name reads tp{t}-pp{p} and nothing else", "[layout]") {
  auto ok = [](std::string_view n, int t, int p) {
    INFO("name: " << n);
    auto id = parse_shard_name(n);
    REQUIRE(id.has_value());
    CHECK(id->t == t);
    CHECK(id->p == p);
  };
  ok("tp0-pp0", 0, 0);
  ok("tp3-pp1", 3, 1);
  ok("tp12-pp105", 12, 105);
  ok("tp999999-pp0", 999999, 0);
  for (std::string_view bad : {"tp01-pp0", "tp0-pp00", "tp-pp0",        "tp1-pp",
                               "tp1pp0",   "tp1-pp0x", "xtp1-pp0",      "tp1-pp0.safetensors",
                               "",         "tp",       "tp1-",          "TP1-PP0",
                               "tp1-pp-1", "tp-1-pp0", "tp-0-pp0",      "tp1-pp+1",
                               "tp 1-pp0", "tp1-pp 0", "tp1000000-pp0", "tp1-pp0-pp0"}) {
    INFO("name: '" << bad << "'");
    CHECK_FALSE(parse_shard_name(bad).has_value());
  }
}
