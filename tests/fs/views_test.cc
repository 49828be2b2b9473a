#include "fs/views.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fs/content.h"
#include "ptc/formats/npy.h"
#include "ptc/formats/safetensors.h"
#include "tests/fs/fake_step.h"

using namespace ptcfs;
using namespace ptcfs::fs;
using namespace ptcfs::fs::testing;
using ptc::DType;
using ptc::ShardId;

namespace {

// Bytes [off, off + len) of a view, through a ReadBuffer.
std::string read(const View& v, uint64_t off, uint64_t len) {
  ReadBuffer b;
  const auto st = v.read(off, len, b);
  INFO(st.to_string());
  REQUIRE(st.is_ok());
  REQUIRE(b.size() == len);
  std::string out(len, '?');
  REQUIRE(b.copy_to(reinterpret_cast<std::byte*>(out.data())).is_ok());
  return out;
}

// The whole view equals `expected`, read whole, split in two at every offset, and in 300
// random ranges (a fixed seed).
void check_reads(const View& v, const std::string& expected) {
  REQUIRE(v.size() == expected.size());
  CHECK(read(v, 0, v.size()) == expected);
  for (uint64_t s = 0; s <= v.size(); ++s) {
    INFO("split at " << s);
    REQUIRE(read(v, 0, s) + read(v, s, v.size() - s) == expected);
  }
  std::mt19937_64 rng(26);
  for (int i = 0; i < 300; ++i) {
    const uint64_t a = rng() % (v.size() + 1), b = rng() % (v.size() + 1);
    const uint64_t lo = std::min(a, b), hi = std::max(a, b);
    INFO("range [" << lo << ", " << hi << ")");
    REQUIRE(read(v, lo, hi - lo) == expected.substr(lo, hi - lo));
  }
}

// The safetensors file of a shard, built independently of the view: the canonical header of
// its tensors in name order, then their slices.
std::string expected_safetensors(const std::vector<std::pair<formats::TensorDecl, std::string>>& tensors) {
  auto sorted = tensors;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first.name < b.first.name; });
  std::vector<formats::TensorDecl> decls;
  std::string data;
  for (const auto& [d, bytes] : sorted) {
    decls.push_back(d);
    data += bytes;
  }
  auto l = formats::layout_safetensors(decls);
  REQUIRE(l.is_ok());
  return l->header + data;
}

}  // namespace

TEST_CASE("a shard view is the canonical safetensors header followed by the slices in name order") {
  auto c = std::make_shared<FakeStep>(7);
  SECTION("tp0-pp1: a replicated tensor, a split one named with a folder, a column split") {
    // Given out of name order: the expected file sorts them itself.
    const std::string expected = expected_safetensors({
        {{"layers.1.dense", DType::F32, {2, 2}}, slice_bytes(0, kDense, 16)},
        {{"head/bias", DType::F16, {2}}, slice_bytes(0, kHeadBias, 4)},
        {{"final_norm", DType::F32, {3}}, slice_bytes(0, kFinalNorm, 12)},
    });
    auto v = shard_safetensors_view(c, ShardId{0, 1});
    REQUIRE(v);
    CHECK(v->size() == expected.size());
    check_reads(*v, expected);
  }
  SECTION("tp1-pp0: a slice that is all padding reads as zeros, a fused tensor its rank's rows of each part") {
    const std::string expected = expected_safetensors({
        {{"layers.0.qkv", DType::F32, {2, 2}}, slice_bytes(1, kQkv, 16)},
        {{"emb.weight", DType::I16, {4, 3}}, std::string(24, '\0')},
    });
    auto v = shard_safetensors_view(c, ShardId{1, 0});
    REQUIRE(v);
    check_reads(*v, expected);
  }
  SECTION("every shard") {
    const auto& layout = c->layout();
    for (const auto& shard : layout.shards()) {
      INFO(shard.name());
      std::vector<std::pair<formats::TensorDecl, std::string>> tensors;
      for (const auto& sl : layout.slices(shard))
        tensors.push_back({{layout.tensor(sl).name, layout.tensor(sl).dtype, sl.local_shape},
                           slice_bytes(shard.t, sl.tensor, layout.bytes(sl))});
      auto v = shard_safetensors_view(c, shard);
      REQUIRE(v);
      check_reads(*v, expected_safetensors(tensors));
    }
  }
}

TEST_CASE("a shard view's data offsets name each tensor's slice") {
  auto c = std::make_shared<FakeStep>(7);
  auto v = shard_safetensors_view(c, ShardId{0, 1});
  REQUIRE(v);
  const std::string file = read(*v, 0, v->size());
  auto h = formats::parse_safetensors(file, file.size(), "tp0-pp1.safetensors");
  REQUIRE(h.is_ok());
  REQUIRE(h->entries.size() == 3);
  CHECK(h->entries[0].name == "final_norm");
  CHECK(h->entries[0].begin == 0);
  CHECK(h->entries[0].end == 12);
  CHECK(h->entries[1].name == "head/bias");
  CHECK(h->entries[1].begin == 12);
  CHECK(h->entries[1].end == 16);
  CHECK(h->entries[2].name == "layers.1.dense");
  CHECK(h->entries[2].shape == ptc::Shape{2, 2});
  CHECK(h->entries[2].begin == 16);
  CHECK(h->entries[2].end == 32);
  CHECK(file.substr(h->data_start + 16) == logical(kDense).substr(0, 8) + logical(kDense).substr(16, 8));
}

TEST_CASE("a slice npy view is the npy header of the local shape followed by the stored slice, padding included") {
  auto c = std::make_shared<FakeStep>(7);
  struct Case {
    ShardId shard;
    size_t slice;
    DType dtype;
    ptc::Shape shape;
    std::string body;
  };
  const Case cases[] = {
      {{0, 0}, 0, DType::I16, {4, 3}, logical(kEmb) + std::string(12, '\0')},
      {{1, 0}, 0, DType::I16, {4, 3}, std::string(24, '\0')},  // nothing stored: zeros
      {{0, 0}, 1, DType::F32, {2, 2}, logical(kQkv).substr(0, 8) + logical(kQkv).substr(16, 8)},
      {{1, 0}, 1, DType::F32, {2, 2}, logical(kQkv).substr(8, 8) + logical(kQkv).substr(24, 8)},
      {{1, 1}, 0, DType::F32, {3}, logical(kFinalNorm)},
      {{1, 1}, 1, DType::F16, {2}, logical(kHeadBias).substr(4, 4)},
      {{1, 1}, 2, DType::F32, {2, 2}, logical(kDense).substr(8, 8) + logical(kDense).substr(24, 8)},
  };
  for (const auto& k : cases) {
    INFO(k.shard.name() << " slice " << k.slice);
    auto v = slice_npy_view(c, k.shard, k.slice);
    const std::string expected = formats::npy_header(k.dtype, k.shape) + k.body;
    CHECK(v->size() == 128 + k.body.size());
    check_reads(*v, expected);
  }
}

TEST_CASE("a full npy view is the logical tensor assembled from the covering slices, padding excluded") {
  auto c = std::make_shared<FakeStep>(7);
  struct Case {
    size_t tensor;
    DType dtype;
    ptc::Shape shape;
  };
  const Case cases[] = {
      {kEmb, DType::I16, {2, 3}},  // rank 0's 2 padding rows and rank 1's all-padding slice left out
      {kFinalNorm, DType::F32, {3}}, {kHeadBias, DType::F16, {4}},
      {kQkv, DType::F32, {4, 2}},    // rows of both parts from both ranks, interleaved back
      {kDense, DType::F32, {2, 4}},  // columns from both ranks, row by row
  };
  for (const auto& k : cases) {
    INFO("tensor " << k.tensor);
    auto v = full_npy_view(c, k.tensor);
    const std::string expected = formats::npy_header(k.dtype, k.shape) + logical(k.tensor);
    CHECK(v->size() == 128 + logical(k.tensor).size());
    check_reads(*v, expected);
  }
}

TEST_CASE("views report the version they read, and the bytes view none") {
  auto c = std::make_shared<FakeStep>(42);
  CHECK(shard_safetensors_view(c, ShardId{0, 0})->version() == 42);
  CHECK(slice_npy_view(c, ShardId{0, 0}, 1)->version() == 42);
  CHECK(full_npy_view(c, kQkv)->version() == 42);
  CHECK(bytes_view("{}\n")->version() == 0);
  CHECK(shard_safetensors_view(c, ShardId{0, 0})->kind() == metrics::ViewKind::kRankFile);
  CHECK(slice_npy_view(c, ShardId{0, 0}, 1)->kind() == metrics::ViewKind::kSliceNpy);
  CHECK(full_npy_view(c, kQkv)->kind() == metrics::ViewKind::kFullNpy);
  CHECK(bytes_view("{}\n")->kind() == metrics::ViewKind::kMetadata);
}

TEST_CASE("a view keeps reading the version it was built on after its last other owner lets go") {
  auto c = std::make_shared<FakeStep>(3);
  std::weak_ptr<const StepContent> weak = c;
  auto v = full_npy_view(c, kDense);
  c.reset();
  CHECK_FALSE(weak.expired());
  CHECK(read(*v, 128, 32) == logical(kDense));
  v.reset();
  CHECK(weak.expired());
}

TEST_CASE("a bytes view reads its bytes") {
  auto v = bytes_view("hello, mount\n");
  check_reads(*v, "hello, mount\n");
}

TEST_CASE("a slice read that fails fails the view's read with its code") {
  auto c = std::make_shared<FakeStep>(7);
  c->unavailable.insert("tp1-pp1");
  auto shard = shard_safetensors_view(c, ShardId{1, 1});
  REQUIRE(shard);
  ReadBuffer b;
  CHECK(shard->read(0, shard->size(), b).code() == Code::kUnavailable);
  ReadBuffer header_only;  // the header is the view's own: no slice is read
  CHECK(shard->read(0, 8, header_only).is_ok());
  ReadBuffer full;  // layers.1.dense is covered by tp0-pp1 and tp1-pp1
  CHECK(full_npy_view(c, kDense)->read(0, 128 + 32, full).code() == Code::kUnavailable);
}
