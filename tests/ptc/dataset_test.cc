#include <algorithm>
#include <numeric>
#include <random>

#include <catch2/catch.hpp>

#include "ptc/dataset.h"

using namespace ptcfs;
using namespace ptcfs::ptc;

namespace {
std::vector<uint32_t> first10(const std::vector<uint32_t>& v) { return {v.begin(), v.begin() + 10}; }
}  // namespace

TEST_CASE("the epoch order is the documented one, fixed for every later version", "[dataset]") {
  // Golden values from tests/tools/ptcds.py, an independent Python implementation of the
  // algorithm in ptc/dataset.h; a change here breaks every stored dataset position.
  CHECK(epoch_order(0, 0, 10) == std::vector<uint32_t>{6, 8, 3, 7, 9, 1, 0, 4, 5, 2});
  CHECK(epoch_order(42, 0, 10) == std::vector<uint32_t>{6, 9, 0, 7, 1, 3, 8, 4, 5, 2});
  CHECK(epoch_order(42, 1, 10) == std::vector<uint32_t>{9, 3, 1, 2, 8, 4, 0, 7, 5, 6});
  CHECK(first10(epoch_order(7, 3, 1000)) == std::vector<uint32_t>{66, 506, 392, 130, 850, 32, 90, 145, 159, 919});
}

TEST_CASE("an epoch order is a permutation, and epochs differ", "[dataset]") {
  for (uint64_t n : {1u, 2u, 3u, 97u, 4096u}) {
    auto o = epoch_order(5, 2, n);
    std::sort(o.begin(), o.end());
    std::vector<uint32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0u);
    CHECK(o == ids);
  }
  CHECK(epoch_order(5, 0, 1000) != epoch_order(5, 1, 1000));
  CHECK(epoch_order(5, 0, 1000) != epoch_order(6, 0, 1000));
}

TEST_CASE("uniform draws stay in range, including the largest bound", "[dataset]") {
  SplitMix64 g(1);
  for (uint64_t m : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{1} << 63, ~uint64_t{0}})
    for (int i = 0; i < 100; ++i) CHECK(g.uniform(m) < m);
}

TEST_CASE("interleaving the rank chunks batch by batch gives the global order", "[dataset]") {
  DatasetSpec spec;
  spec.global_batch = 12;
  spec.num_samples = 100;  // 8 batches, 4 dropped
  CHECK(epoch_dropped(spec, {}) == 4);
  const auto order = epoch_order(3, 0, spec.num_samples);
  for (int dp : {1, 2, 3, 4, 6, 12})
    for (uint64_t consumed : {uint64_t{0}, uint64_t{24}, uint64_t{96}}) {
      std::vector<std::vector<uint32_t>> ranks;
      for (int d = 0; d < dp; ++d) ranks.push_back(rank_samples(order, spec, {dp, 0, consumed, 0}, d));
      std::vector<uint32_t> merged;
      const size_t chunk = 12 / static_cast<size_t>(dp);
      for (size_t b = 0; b < ranks[0].size() / chunk; ++b)
        for (int d = 0; d < dp; ++d)
          merged.insert(merged.end(), ranks[static_cast<size_t>(d)].begin() + static_cast<ptrdiff_t>(b * chunk),
                        ranks[static_cast<size_t>(d)].begin() + static_cast<ptrdiff_t>((b + 1) * chunk));
      const std::vector<uint32_t> expect(order.begin() + static_cast<ptrdiff_t>(consumed), order.begin() + 96);
      CHECK(merged == expect);
    }
}

TEST_CASE("positions are validated and the end of an epoch starts the next", "[dataset]") {
  DatasetSpec spec;
  spec.global_batch = 8;
  spec.num_samples = 50;  // 48 per epoch
  REQUIRE(check_spec(spec).is_ok());
  DatasetPosition pos{4, 0, 0, 0};
  CHECK(check_position(spec, pos).is_ok());
  CHECK(check_dp(spec, 3).code() == Code::kInvalidArgument);
  CHECK(check_dp(spec, 3).message() == "the global batch 8 is not divisible by dp=3");
  CHECK(progressed(spec, pos, 0, 12).status().code() == Code::kInvalidArgument);
  CHECK(progressed(spec, pos, 0, 56).status().code() == Code::kOutOfRange);
  auto p = progressed(spec, pos, 0, 40);
  REQUIRE(p.is_ok());
  CHECK(*p == DatasetPosition{4, 0, 40, 0});
  p = progressed(spec, pos, 0, 48);
  REQUIRE(p.is_ok());
  CHECK(*p == DatasetPosition{4, 1, 0, 0});
  spec.num_samples = 7;
  CHECK(check_spec(spec).code() == Code::kInvalidArgument);
  spec.num_samples = 0;
  CHECK(check_spec(spec).message() == "the dataset is empty: no samples");
}

namespace {

// What the ranks read, batch by batch and rank by rank: the global sequence they train on.
std::vector<uint32_t> interleaved(const std::vector<uint32_t>& order, const DatasetSpec& spec,
                                  const DatasetPosition& pos) {
  std::vector<std::vector<uint32_t>> ranks;
  for (int d = 0; d < pos.dp; ++d) ranks.push_back(rank_samples(order, spec, pos, d));
  const size_t chunk = spec.global_batch / static_cast<uint64_t>(pos.dp);
  std::vector<uint32_t> out;
  for (size_t b = 0; b < ranks[0].size() / chunk; ++b)
    for (const auto& r : ranks)
      out.insert(out.end(), r.begin() + static_cast<ptrdiff_t>(b * chunk),
                 r.begin() + static_cast<ptrdiff_t>((b + 1) * chunk));
  return out;
}

}  // namespace

TEST_CASE("a new global batch continues the epoch's order exactly: exact sample ids", "[dataset]") {
  DatasetSpec spec;
  spec.seed = 0;
  spec.global_batch = 4;
  spec.num_samples = 10;
  // epoch_order(0, 0, 10) = 6 8 3 7 | 9 1 0 4 | 5 2 (golden above): B=4, dp=2.
  const auto order = epoch_order(0, 0, 10);
  DatasetPosition pos{2, 0, 4, 0};  // one batch (6 8 3 7) consumed
  CHECK(rank_samples(order, spec, pos, 0) == std::vector<uint32_t>{9, 1});
  CHECK(rank_samples(order, spec, pos, 1) == std::vector<uint32_t>{0, 4});
  CHECK(epoch_end(spec, pos) == 8);
  CHECK(epoch_dropped(spec, pos) == 2);
  // B 4 -> 3 with dp 3 at consumed 4: batches 9 1 0 | 4 5 2, nothing dropped.
  auto r = rebatched(spec, pos, 3, 3);
  REQUIRE(r.is_ok());
  CHECK(r->global_batch == 3);
  CHECK(r->pos == DatasetPosition{3, 0, 4, 4});
  DatasetSpec s3 = spec;
  s3.global_batch = 3;
  CHECK(rank_samples(order, s3, r->pos, 0) == std::vector<uint32_t>{9, 4});
  CHECK(rank_samples(order, s3, r->pos, 1) == std::vector<uint32_t>{1, 5});
  CHECK(rank_samples(order, s3, r->pos, 2) == std::vector<uint32_t>{0, 2});
  CHECK(epoch_end(s3, r->pos) == 10);
  CHECK(epoch_dropped(s3, r->pos) == 0);
  // Progress by one batch of 3, then the end of the epoch starts the next at offset 0.
  auto p = progressed(s3, r->pos, 0, 7);
  REQUIRE(p.is_ok());
  CHECK(*p == DatasetPosition{3, 0, 7, 4});
  CHECK(interleaved(order, s3, *p) == std::vector<uint32_t>{4, 5, 2});
  CHECK(progressed(s3, r->pos, 0, 6).status().message() ==
        "consumed 6 is not batch_offset 4 plus a multiple of the global batch 3");
  p = progressed(s3, r->pos, 0, 10);
  REQUIRE(p.is_ok());
  CHECK(*p == DatasetPosition{3, 1, 0, 0});
  // B 4 -> 8 at consumed 4: fewer than 8 samples left (6), so the epoch ends there (9 1 0 4 5 2
  // dropped) and epoch 1 starts at 0.
  auto big = rebatched(spec, pos, 2, 8);
  REQUIRE(big.is_ok());
  CHECK(big->pos == DatasetPosition{2, 1, 0, 0});
  // B 4 -> 2 at consumed 4: batches 9 1 | 0 4 | 5 2.
  auto small = rebatched(spec, pos, 1, 2);
  REQUIRE(small.is_ok());
  DatasetSpec s2 = spec;
  s2.global_batch = 2;
  CHECK(interleaved(order, s2, small->pos) == std::vector<uint32_t>{9, 1, 0, 4, 5, 2});
  // The same batch: dp only, the offset kept.
  auto same = rebatched(s3, *p, 1, 3);
  REQUIRE(same.is_ok());
  CHECK(same->pos == DatasetPosition{1, 1, 0, 0});
  // Refused, nothing to change: dp not dividing the new batch, a batch above the dataset, 0.
  CHECK(rebatched(spec, pos, 2, 3).status().message() == "the global batch 3 is not divisible by dp=2");
  CHECK(rebatched(spec, pos, 1, 11).status().code() == Code::kInvalidArgument);
  CHECK(rebatched(spec, pos, 1, 0).status().message() == "the global batch must be at least 1");
}

TEST_CASE("changes of global batch and dp keep the single-rank order, at every step", "[dataset]") {
  // Random walks of progress and rebatching over one epoch of 97 samples: the global batches
  // read, concatenated, are the epoch's order up to the samples each rebatch drops.
  std::mt19937 rng(29);
  DatasetSpec spec;
  spec.seed = 5;
  spec.num_samples = 97;
  const auto order = epoch_order(5, 0, 97);
  for (int round = 0; round < 200; ++round) {
    spec.global_batch = 6;
    DatasetPosition pos{2, 0, 0, 0};
    std::vector<uint32_t> read;
    while (pos.epoch == 0) {
      const uint64_t b = spec.global_batch;
      const auto seq = interleaved(order, spec, pos);
      REQUIRE(seq == std::vector<uint32_t>(order.begin() + static_cast<ptrdiff_t>(pos.consumed),
                                           order.begin() + static_cast<ptrdiff_t>(epoch_end(spec, pos))));
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
        const uint64_t nb = std::uniform_int_distribution<uint64_t>(1, 24)(rng);
        const int dp = static_cast<int>(nb % 2 == 0 ? 2 : 1);
        auto r = rebatched(spec, pos, dp, nb);
        REQUIRE(r.is_ok());
        spec.global_batch = r->global_batch;
        pos = r->pos;
        continue;
      }
      read.insert(read.end(), seq.begin(), seq.begin() + static_cast<ptrdiff_t>(b));
      auto p = progressed(spec, pos, 0, pos.consumed + b);
      REQUIRE(p.is_ok());
      pos = *p;
    }
    CHECK(read == std::vector<uint32_t>(order.begin(), order.begin() + static_cast<ptrdiff_t>(read.size())));
  }
}
