// A test double of fs::StepContent (fs/content.h): the daemon implements it over RocksDB and
// blobs (daemon/store/step_version.h); here the stored slices are strings in memory.
//
// The step is a small real ptc.json, laid out by ptc/layout.h, with tp=2, pp=2:
//
//   emb.weight      I16 [2, 3]  tp_dim 0, pad_to 4, first stage: padded to 8 rows, 4 per rank;
//                               rank 0 holds rows 0-1 then 2 padding rows, rank 1 only padding
//                               (stored as nothing: its reads are zeros)
//   final_norm      F32 [3]     replicated, last stage
//   head/bias       F16 [4]     tp_dim 0, last stage: rank t holds elements [2t, 2t+2)
//   layers.0.qkv    F32 [4, 2]  tp_dim 0 in 2 parts, layer 0 (stage 0): rank t holds rows t, 2+t
//   layers.1.dense  F32 [2, 4]  tp_dim 1, layer 1 (stage 1): rank t holds columns [2t, 2t+2)
//
// Byte i of the logical tensor k (name order) is pattern_byte(k, i). The stored slices are
// written here by hand from the geometry above (docs/FORMATS.md "ptc.json"), not from the
// layout's pieces, so that a test comparing a view with them checks the layout too.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "fs/content.h"
#include "fs/views.h"
#include "ptc/layout.h"
#include "ptc/model.h"

namespace ptcfs::fs::testing {

inline constexpr const char* kPtcJson = R"({
  "parallelism": {"tp": 2, "pp": 2, "dp": 1},
  "num_layers": 2,
  "tensors": {
    "layers.1.dense": {"dtype": "F32", "shape": [2, 4], "tp_dim": 1, "layer": 1},
    "emb.weight": {"dtype": "I16", "shape": [2, 3], "tp_dim": 0, "pad_to": 4, "stage": "first"},
    "head/bias": {"dtype": "F16", "shape": [4], "tp_dim": 0, "stage": "last"},
    "final_norm": {"dtype": "F32", "shape": [3], "stage": "last"},
    "layers.0.qkv": {"dtype": "F32", "shape": [4, 2], "tp_dim": 0, "parts": 2, "layer": 0}
  }
})";

// Tensor indices in name order (Ptc::tensors is sorted by name).
enum Tensor : size_t { kEmb = 0, kFinalNorm = 1, kHeadBias = 2, kQkv = 3, kDense = 4 };

// Never zero, and distinct for the first 128 bytes of a tensor, so that a misplaced or
// missing byte shows.
inline char pattern_byte(size_t tensor, uint64_t i) { return static_cast<char>(0x80 | ((tensor * 29 + i * 3) & 0x7f)); }

inline std::string logical_bytes(size_t tensor, uint64_t n) {
  std::string out(n, '\0');
  for (uint64_t i = 0; i < n; ++i) out[i] = pattern_byte(tensor, i);
  return out;
}

// The logical bytes of each tensor: 12, 12, 8, 32 and 32 bytes.
inline std::string logical(size_t tensor) {
  static const uint64_t kBytes[] = {2 * 3 * 2, 3 * 4, 4 * 2, 4 * 2 * 4, 2 * 4 * 4};
  return logical_bytes(tensor, kBytes[tensor]);
}

// What shard (t, p) stores of a tensor, by the geometry above; nullopt: nothing stored
// (all padding).
inline std::optional<std::string> stored_slice(int t, size_t tensor) {
  const std::string g = logical(tensor);
  switch (tensor) {
    case kEmb:
      if (t == 1) return std::nullopt;
      return g + std::string(12, '\0');  // rows 0-1, then padding rows 2-3 (6 bytes each)
    case kFinalNorm:
      return g;
    case kHeadBias:
      return g.substr(4 * t, 4);
    case kQkv:
      return g.substr(8 * t, 8) + g.substr(16 + 8 * t, 8);  // rows t and 2+t, 8 bytes each
    case kDense:
      return g.substr(8 * t, 8) + g.substr(16 + 8 * t, 8);  // columns 2t, 2t+1 of both rows
  }
  FAIL("no tensor " << tensor);
  return std::nullopt;
}

// The bytes a shard's slice reads as: what is stored, or zeros.
inline std::string slice_bytes(int t, size_t tensor, uint64_t size) {
  return stored_slice(t, tensor).value_or(std::string(size, '\0'));
}

// `hf_config`: the step's Ptc::hf_config (empty: none).
inline ptc::Layout test_layout(const std::string& hf_config = "") {
  auto ptc = ptc::parse_ptc_json(kPtcJson, "ptc.json");
  REQUIRE(ptc.is_ok());
  ptc->hf_config = hf_config;
  auto layout = ptc::Layout::make(*ptc, ptc->parallelism);
  REQUIRE(layout.is_ok());
  return std::move(layout).value();
}

// Every byte of a view, read at once.
inline std::string read_all(const View& v) {
  ReadBuffer b;
  REQUIRE(v.read(0, v.size(), b).is_ok());
  std::string out(b.size(), '?');
  REQUIRE(b.copy_to(reinterpret_cast<std::byte*>(out.data())).is_ok());
  return out;
}

class FakeStep final : public StepContent {
 public:
  explicit FakeStep(uint64_t version, int64_t mtime = 1700000000, const std::string& hf_config = "",
                    std::string origin = "")
      : layout_(test_layout(hf_config)), version_(version), mtime_(mtime), origin_(std::move(origin)) {
    for (int t = 0; t < 2; ++t)
      for (size_t k = 0; k < layout_.ptc().tensors.size(); ++k) stored_[{t, k}] = stored_slice(t, k);
  }

  const ptc::Layout& layout() const override { return layout_; }
  uint64_t version() const override { return version_; }
  const std::string& origin() const override { return origin_; }
  int64_t mtime() const override { return mtime_; }
  Status read_slice(const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
                    ReadBuffer& out) const override {
    if (unavailable.count(shard.name()))
      return ptcfs::unavailable("shard " + shard.name() + " is not held on this node");
    const auto& sl = layout_.slices(shard).at(slice);
    if (off + len > layout_.bytes(sl)) return internal("read past the end of a stored slice");
    const auto& stored = stored_.at({shard.t, sl.tensor});
    if (!stored) {
      out.add_zeros(len);
    } else {
      out.add_mem(stored->data() + off, len);
    }
    return Status::ok();
  }

  bool holds(const ptc::ShardId& shard) const override { return !unavailable.count(shard.name()); }

  // Shards whose reads fail with kUnavailable (not held here, no peer).
  std::set<std::string> unavailable;

 private:
  ptc::Layout layout_;
  uint64_t version_;
  int64_t mtime_;
  std::string origin_;
  // By (TP rank, tensor); both stages' shards of a rank hold different tensors.
  std::map<std::pair<int, size_t>, std::optional<std::string>> stored_;
};

}  // namespace ptcfs::fs::testing
