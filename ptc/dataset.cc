#include "ptc/dataset.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace ptcfs::ptc {

const char* format_name(DatasetFormat f) { return f == DatasetFormat::kJsonl ? "jsonl" : "megatron"; }

Result<DatasetFormat> parse_dataset_format(const std::string& name) {
  if (name == "jsonl") return DatasetFormat::kJsonl;
  if (name == "megatron") return DatasetFormat::kMegatron;
  return invalid("unknown dataset format '" + name + "' (jsonl or megatron)");
}

Status check_spec(const DatasetSpec& spec) {
  if (spec.global_batch < 1) return invalid("the global batch must be at least 1");
  if (spec.num_samples == 0) return invalid("the dataset is empty: no samples");
  if (spec.num_samples > kMaxSamples)
    return invalid("the dataset has " + std::to_string(spec.num_samples) + " samples; at most " +
                   std::to_string(kMaxSamples) + " are supported");
  if (spec.num_samples < spec.global_batch)
    return invalid("the dataset has " + std::to_string(spec.num_samples) + " samples, fewer than one global batch of " +
                   std::to_string(spec.global_batch));
  return Status::ok();
}

Status check_dp(const DatasetSpec& spec, int dp) {
  if (dp < 1) return invalid("dp must be at least 1, got " + std::to_string(dp));
  if (spec.global_batch % static_cast<uint64_t>(dp) != 0)
    return invalid("the global batch " + std::to_string(spec.global_batch) +
                   " is not divisible by dp=" + std::to_string(dp));
  return Status::ok();
}

uint64_t epoch_end(const DatasetSpec& spec, const DatasetPosition& pos) {
  if (pos.batch_offset >= spec.num_samples) return pos.batch_offset;
  const uint64_t rest = spec.num_samples - pos.batch_offset;
  return pos.batch_offset + rest / spec.global_batch * spec.global_batch;
}

uint64_t epoch_dropped(const DatasetSpec& spec, const DatasetPosition& pos) {
  return spec.num_samples - std::min(spec.num_samples, epoch_end(spec, pos));
}

Status check_position(const DatasetSpec& spec, const DatasetPosition& pos) {
  PTC_RETURN_IF_ERROR(check_dp(spec, pos.dp));
  if (pos.batch_offset > pos.consumed)
    return invalid("batch_offset " + std::to_string(pos.batch_offset) + " is past consumed " +
                   std::to_string(pos.consumed));
  if ((pos.consumed - pos.batch_offset) % spec.global_batch != 0)
    return invalid("consumed " + std::to_string(pos.consumed) + " is not " +
                   (pos.batch_offset ? "batch_offset " + std::to_string(pos.batch_offset) + " plus " : std::string()) +
                   "a multiple of the global batch " + std::to_string(spec.global_batch));
  const uint64_t end = epoch_end(spec, pos);
  if (pos.consumed > end || pos.consumed > spec.num_samples)
    return error(Code::kOutOfRange, "consumed " + std::to_string(pos.consumed) + " is past the end of the epoch (" +
                                        std::to_string(end) + " samples)");
  return Status::ok();
}

namespace {

// The first position of the next epoch when `pos` is at the end of its epoch.
DatasetPosition next_epoch_at_end(const DatasetSpec& spec, DatasetPosition pos) {
  if (pos.consumed == epoch_end(spec, pos)) {
    pos.epoch += 1;
    pos.consumed = 0;
    pos.batch_offset = 0;
  }
  return pos;
}

}  // namespace

Result<DatasetPosition> progressed(const DatasetSpec& spec, const DatasetPosition& pos, uint64_t epoch,
                                   uint64_t consumed) {
  DatasetPosition next = pos;
  if (epoch != pos.epoch) next.batch_offset = 0;
  next.epoch = epoch;
  next.consumed = consumed;
  PTC_RETURN_IF_ERROR(check_position(spec, next));
  return next_epoch_at_end(spec, next);
}

Result<Rebatched> rebatched(const DatasetSpec& spec, const DatasetPosition& pos, int dp, uint64_t global_batch) {
  DatasetSpec next_spec = spec;
  next_spec.global_batch = global_batch;
  PTC_RETURN_IF_ERROR(check_spec(next_spec));
  PTC_RETURN_IF_ERROR(check_dp(next_spec, dp));
  Rebatched out{global_batch, pos};
  out.pos.dp = dp;
  if (global_batch == spec.global_batch) return out;
  out.pos.batch_offset = pos.consumed;
  out.pos = next_epoch_at_end(next_spec, out.pos);
  return out;
}

uint64_t SplitMix64::mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  return mix(state_);
}

uint64_t SplitMix64::uniform(uint64_t m) {
  const uint64_t threshold = (0 - m) % m;  // (2^64 - m) mod m
  for (;;) {
    const uint64_t x = next();
    if (x >= threshold) return x % m;
  }
}

std::vector<uint32_t> epoch_order(uint64_t seed, uint64_t epoch, uint64_t num_samples) {
  std::vector<uint32_t> a(num_samples);
  std::iota(a.begin(), a.end(), 0u);
  SplitMix64 g(SplitMix64::mix(seed) ^ SplitMix64::mix(epoch ^ 0xD1B54A32D192ED03ull));
  for (uint64_t i = num_samples; i-- > 1;) std::swap(a[i], a[g.uniform(i + 1)]);
  return a;
}

std::vector<uint32_t> rank_samples(const std::vector<uint32_t>& order, const DatasetSpec& spec,
                                   const DatasetPosition& pos, int rank) {
  const uint64_t b = spec.global_batch, chunk = b / static_cast<uint64_t>(pos.dp);
  const uint64_t end = epoch_end(spec, pos);
  std::vector<uint32_t> out;
  if (pos.consumed >= end) return out;
  out.reserve((end - pos.consumed) / static_cast<uint64_t>(pos.dp));
  for (uint64_t start0 = pos.consumed; start0 < end; start0 += b) {
    const uint64_t start = start0 + static_cast<uint64_t>(rank) * chunk;
    out.insert(out.end(), order.begin() + static_cast<ptrdiff_t>(start),
               order.begin() + static_cast<ptrdiff_t>(start + chunk));
  }
  return out;
}

}  // namespace ptcfs::ptc
