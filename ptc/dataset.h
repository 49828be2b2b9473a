// Datasets as PTCs (docs/ARCHITECTURE.md "Concepts", docs/FORMATS.md "Dataset order"): a sequence of samples
// partitioned over DP ranks by a deterministic global order. Pure: no I/O.
//
// The order (docs/FORMATS.md "Dataset order" states it for other implementations):
//   - Epoch e of a dataset with seed S and n samples is a permutation of 0..n-1 drawn by a
//     Fisher-Yates shuffle: a = [0, 1, ..., n-1]; for i = n-1 down to 1: j = uniform(i+1),
//     swap a[i] and a[j].
//   - uniform(m) draws x from the generator until x >= (2^64 - m) mod m and returns x mod m
//     (rejection sampling: no modulo bias).
//   - The generator is SplitMix64 (state += 0x9E3779B97F4A7C15, then the output mix
//     z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB; z ^ z>>31),
//     started at state mix(S) XOR mix(e XOR 0xD1B54A32D192ED03), where mix is that output mix.
//   - All arithmetic is on unsigned 64-bit integers, modulo 2^64.
// Global batch k of an epoch is order[k*B, (k+1)*B); DP rank d reads the d-th contiguous
// chunk of B/dp samples of each batch; the n mod B samples after the last whole batch are
// dropped for that epoch (another epoch's order drops others).
// A new global batch B' taken at `consumed` c mid-epoch starts its batches there: batch k
// of the rest of the epoch is order[c + k*B', c + (k+1)*B') (the position's batch_offset is
// c), and the (n - c) mod B' samples after the last whole one are dropped; the next epoch
// starts at offset 0 (docs/FORMATS.md "A new global batch").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::ptc {

enum class DatasetFormat { kJsonl, kMegatron };
const char* format_name(DatasetFormat f);
Result<DatasetFormat> parse_dataset_format(const std::string& name);

// What never changes after a dataset is added, but the global batch (a repartition may give a new one,
// see rebatched()).
struct DatasetSpec {
  DatasetFormat format = DatasetFormat::kJsonl;
  uint64_t seed = 0;
  uint64_t global_batch = 1;  // B
  uint64_t num_samples = 0;   // n
};

// Where training is: what changes with progress and repartitions.
struct DatasetPosition {
  int dp = 1;
  uint64_t epoch = 0;
  uint64_t consumed = 0;      // samples of this epoch already read (batch_offset + a multiple of B)
  uint64_t batch_offset = 0;  // where this epoch's batches of B start: the consumed count when B changed
  bool operator==(const DatasetPosition&) const = default;
};

// The samples of this epoch read by its end (the offset, then whole batches of B after it),
// and those dropped after them.
uint64_t epoch_end(const DatasetSpec& spec, const DatasetPosition& pos);
uint64_t epoch_dropped(const DatasetSpec& spec, const DatasetPosition& pos);

// The largest dataset: sample ids are 32-bit.
inline constexpr uint64_t kMaxSamples = 0xFFFFFFFFull;

// The largest dp a dataset is split for.
inline constexpr int kMaxDatasetDp = 1 << 20;

// Validates a spec (n >= B >= 1, n <= kMaxSamples).
Status check_spec(const DatasetSpec& spec);
// Validates a position against a spec: dp >= 1 dividing B, batch_offset <= consumed,
// consumed - batch_offset a multiple of B, consumed at most epoch_end(). Messages name the field.
Status check_position(const DatasetSpec& spec, const DatasetPosition& pos);
// kInvalidArgument unless dp divides the global batch (the message says both).
Status check_dp(const DatasetSpec& spec, int dp);

// The position after training has consumed `consumed` samples of epoch `epoch` (another epoch
// than pos's has batch_offset 0); consuming the whole epoch starts the next one at 0.
// Validates like check_position.
Result<DatasetPosition> progressed(const DatasetSpec& spec, const DatasetPosition& pos, uint64_t epoch,
                                   uint64_t consumed);

// A dataset at `pos` re-split for dp `dp` and global batch `global_batch`: the same position
// when the batch is unchanged (dp only), otherwise batches of the new size start at the
// consumed count (batch_offset = consumed), and when fewer than one new batch is left in the
// epoch, the next epoch starts (the rest of this one is dropped). kInvalidArgument when dp
// does not divide the new batch or the dataset has fewer samples than one (nothing changed).
struct Rebatched {
  uint64_t global_batch = 0;
  DatasetPosition pos;
};
Result<Rebatched> rebatched(const DatasetSpec& spec, const DatasetPosition& pos, int dp, uint64_t global_batch);

// SplitMix64 as above.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t next();
  static uint64_t mix(uint64_t z);
  // Uniform in [0, m), m >= 1, by rejection.
  uint64_t uniform(uint64_t m);

 private:
  uint64_t state_;
};

// The permutation of epoch `epoch`.
std::vector<uint32_t> epoch_order(uint64_t seed, uint64_t epoch, uint64_t num_samples);

// The samples rank `rank` of pos.dp reads from pos.consumed to the end of the epoch, in
// order: with o = pos.batch_offset, c = pos.consumed, the i-th is
// order[o + ((c - o)/B + i/(B/dp)) * B + rank*(B/dp) + i mod (B/dp)]. Requires a valid position.
std::vector<uint32_t> rank_samples(const std::vector<uint32_t>& order, const DatasetSpec& spec,
                                   const DatasetPosition& pos, int rank);

}  // namespace ptcfs::ptc
