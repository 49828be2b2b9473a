// Layouts: for a PTC and a parallel config, the region of every tensor each shard holds.
//
// A shard (t, p) is TP rank t of pipeline stage p; DP replicas hold identical shards and are
// not separate shards. The slice of tensor X that shard (t, p) stores has a local shape; it
// is made of pieces, each mapping a box of the local slice onto an equal box of the global
// logical tensor. Local elements no piece covers are padding and read as zeros.
//
//   replicated:  one piece, local = global = the whole tensor.
//   tp_dim k, parts n, size N along k: part size q = N/n, chunk c = q/tp; piece j maps local
//                [j*c, (j+1)*c) to global [j*q + t*c, j*q + (t+1)*c) along k (n = 1: plain split).
//   pad_to m:    padded size P = ceil(N / (m*tp)) * m*tp, chunk c = P/tp; local [0, c) is padded
//                rows [t*c, (t+1)*c); the piece covers the part below N (none if t*c >= N).
//   stages:      layer i of L goes to the stage whose contiguous group holds it; groups are
//                as even as possible, earlier stages taking the remainder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ptc/model.h"

namespace ptcfs::ptc {

struct ShardId {
  int t = 0, p = 0;
  std::string name() const;  // "tp{t}-pp{p}"
  bool operator==(const ShardId&) const = default;
  auto operator<=>(const ShardId&) const = default;
};

// Parses "tp{t}-pp{p}"; nullopt when the name is not of that form.
std::optional<ShardId> parse_shard_name(std::string_view name);

struct Piece {
  Box local;   // in the slice's coordinates
  Box global;  // in the logical tensor's coordinates; same extent as local
};

struct Slice {
  size_t tensor = 0;  // index into Ptc::tensors
  Shape local_shape;
  std::vector<Piece> pieces;
};

class Layout {
 public:
  // Validates the config against the PTC (degrees >= 1, tp dividing every split part and
  // every head count, pp <= num_layers when num_layers > 0, stage lists inside [0, pp)) and builds the layout.
  static Result<Layout> make(const Ptc& ptc, Parallelism par);
  // This layout's PTC at `par`: a change of dp alone re-splits nothing (dp places replicas of the
  // same shards), so the slices are then shared with this layout, not made again.
  Result<Layout> at(Parallelism par) const;
  // Whether a and b hold the same slices in the same shards: one was made from the other by at()
  // with only dp changed.
  static bool same_split(const Layout& a, const Layout& b) { return a.slices_ == b.slices_; }

  const TensorSpec& tensor(const Slice& s) const { return ptc_.tensors[s.tensor]; }
  // Bytes of the stored slice (padding included).
  uint64_t bytes(const Slice& s) const {
    return static_cast<uint64_t>(num_elements(s.local_shape)) * dtype_size(tensor(s).dtype);
  }
  const Ptc& ptc() const { return ptc_; }
  const Parallelism& parallelism() const { return ptc_.parallelism; }
  // Shards in order (p major, then t): tp0-pp0, tp1-pp0, ..., tp0-pp1, ...
  const std::vector<ShardId>& shards() const { return shards_; }
  // The slices of a shard, sorted by tensor name.
  const std::vector<Slice>& slices(const ShardId& s) const;
  // The stages that hold a tensor.
  std::vector<int> stages_of(const TensorSpec& t) const;
  // For the whole logical tensor: (shard, slice index) pairs whose pieces cover it exactly
  // once (TP rank order at the first stage holding it; TP rank 0 for replicated tensors).
  std::vector<std::pair<ShardId, size_t>> covering(size_t tensor_index) const;
  // Index of (shard, tensor) in slices(shard), or -1 when the shard does not hold it.
  int find_slice(const ShardId& s, size_t tensor_index) const;

 private:
  Ptc ptc_;
  std::vector<ShardId> shards_;
  // Indexed like shards_; shared by the layouts of one PTC that differ only in dp (immutable).
  std::shared_ptr<const std::vector<std::vector<Slice>>> slices_;
};

// The slice that TP rank t of `tp` holds of tensor `spec` (its stage is not checked).
// `index` is stored in Slice::tensor.
Result<Slice> slice_of(const TensorSpec& spec, size_t index, int tp, int t);

}  // namespace ptcfs::ptc
