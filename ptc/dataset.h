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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptc/base/status.h"

namespace ptc {

enum class DatasetFormat { kJsonl, kMegatron };
const char* format_name(DatasetFormat f);
Result<DatasetFormat> parse_dataset_format(const std::string& name);

// What never changes after a dataset is added.
struct DatasetSpec {
  DatasetFormat format = DatasetFormat::kJsonl;
  uint64_t seed = 0;
  uint64_t global_batch = 1;  // B
  uint64_t num_samples = 0;   // n

  uint64_t batches_per_epoch() const { return num_samples / global_batch; }
  uint64_t samples_per_epoch() const { return batches_per_epoch() * global_batch; }
  uint64_t dropped() const { return num_samples - samples_per_epoch(); }
};

// Where training is: what changes with progress and repartitions.
struct DatasetPosition {
  int dp = 1;
  uint64_t epoch = 0;
  uint64_t consumed = 0;  // samples of this epoch already read (a multiple of B)
  bool operator==(const DatasetPosition&) const = default;
};

// The largest dataset: sample ids are 32-bit.
inline constexpr uint64_t kMaxSamples = 0xFFFFFFFFull;

// Validates a spec (n >= B >= 1, n <= kMaxSamples).
Status check_spec(const DatasetSpec& spec);
// Validates a position against a spec: dp >= 1 dividing B, consumed a multiple of B and
// at most samples_per_epoch(). Messages name the field.
Status check_position(const DatasetSpec& spec, const DatasetPosition& pos);
// kInvalidArgument unless dp divides the global batch (the message says both).
Status check_dp(const DatasetSpec& spec, int dp);

// The position after training has consumed `consumed` samples of epoch `epoch`; consuming
// the whole epoch starts the next one at 0. Validates like check_position.
Result<DatasetPosition> progressed(const DatasetSpec& spec, const DatasetPosition& pos, uint64_t epoch,
                                   uint64_t consumed);

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

// The samples rank `rank` of `dp` reads from position `consumed` to the end of the epoch,
// in order: i-th is order[(consumed/B + i/(B/dp)) * B + rank*(B/dp) + i mod (B/dp)].
// Requires a valid position.
std::vector<uint32_t> rank_samples(const std::vector<uint32_t>& order, const DatasetSpec& spec, int dp, int rank,
                                   uint64_t consumed);

}  // namespace ptc
