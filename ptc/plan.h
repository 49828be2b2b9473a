// Plans: the difference between two layouts of the same PTC, as data.
//
// Every piece of every tensor in a layout is a slab: the whole tensor except along one
// dimension k (the tensor's tp_dim; dimension 0 for a replicated tensor, whose one piece is
// the whole tensor; a scalar is one element). So a copy between two slices of a tensor is
// an interval along k: source slab [src_lo, src_lo + len) of the source slice's local
// coordinates goes to destination slab [dst_lo, dst_lo + len), every other dimension whole.
// Local elements of a destination slice that no piece covers are padding: a Fill of zeros.
//
// plan() covers every destination byte exactly once. For each destination piece it sweeps
// along k and, at each point, takes the covering source piece that is best by, in order:
// held on the destination's node; the same shard id (a source already in place); the
// source node with the fewest bytes assigned so far (so replicas share the load); the
// lowest shard index. It then takes as much of that piece as the destination needs.
// The result is deterministic: copies are ordered by destination shard, slice, position.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ptc/layout.h"

namespace ptcfs::ptc {

// Where shards live. Node ids are small integers; a single node is node 0.
struct Holdings {
  std::vector<std::vector<int>> src_nodes;  // per source shard (from.shards() order): nodes holding it
  std::vector<int> dst_node;                // per destination shard (to.shards() order): its node
  int num_nodes = 1;
  // Everything on node 0.
  static Holdings single_node(const Layout& from, const Layout& to);
};

struct Copy {
  uint32_t tensor = 0;                    // index in the PTC's tensors (the same in both layouts)
  uint32_t src_shard = 0, src_slice = 0;  // from.shards() index, index in from.slices(shard)
  uint32_t dst_shard = 0, dst_slice = 0;  // to.shards() index, index in to.slices(shard)
  int32_t src_node = 0;
  int64_t src_lo = 0, dst_lo = 0, len = 0;  // along the slab dimension
  // Cluster plans (ptc/cluster_plan.h) only: the node that builds the destination, and the
  // transfer whose received slab supplies the bytes (-1: a source on dst_node itself).
  int32_t dst_node = 0;
  int32_t transfer = -1;
};

struct Fill {
  uint32_t tensor = 0;
  uint32_t dst_shard = 0, dst_slice = 0;
  int64_t dst_lo = 0, len = 0;
  int32_t dst_node = 0;  // cluster plans only
};

// Cluster plans only: a slab of a source slice sent once from src_node to dst_node, where
// every copy that needs those elements reads it. `glo` is its start in the global tensor.
struct Transfer {
  uint32_t tensor = 0;
  int32_t src_node = 0, dst_node = 0;
  uint32_t src_shard = 0, src_slice = 0;
  int64_t src_lo = 0, glo = 0, len = 0;  // along the slab dimension
  uint64_t bytes = 0;
};

struct Plan {
  std::vector<Copy> copies;
  std::vector<Fill> fills;
  uint64_t bytes_total = 0;         // bytes of all destination slices
  uint64_t bytes_local = 0;         // copied from a source on the destination's node
  uint64_t bytes_remote = 0;        // copied from another node
  uint64_t bytes_fill = 0;          // zeros (padding)
  std::vector<Transfer> transfers;  // cluster plans only (bytes_remote is then their sum)
};

// The slab dimension of a tensor: its tp_dim, else 0; -1 for a scalar.
int slab_dim(const TensorSpec& t);
// Bytes of one unit along the slab dimension (the product of the other dimensions).
uint64_t slab_unit_bytes(const TensorSpec& t, const Shape& local_shape);

// A slice seen along its slab dimension k: `rows` rows (every index of the dimensions
// before k), each `extent` units along k of `inner` bytes (the dimensions after k). A slab
// [lo, lo + len) of it is, row by row, bytes [r * extent * inner + lo * inner, + len * inner).
struct SlabGeometry {
  uint64_t rows = 1, inner = 0;
  int64_t extent = 1;
};
SlabGeometry slab_geometry(const TensorSpec& t, const Shape& local_shape);

// Plans `to` from `from`. Both must be layouts of the same tensors (same names, dtypes,
// shapes and partitioning); kInvalidArgument otherwise.
Result<Plan> make_plan(const Layout& from, const Layout& to, const Holdings& holdings);

// The byte runs of a copy: `len` bytes at `src` in the source slice's bytes go to `dst` in
// the destination slice's bytes; in increasing dst order.
void for_each_copy_run(const Layout& from, const Layout& to, const Copy& c, const std::function<void(const Run&)>& fn);
// The byte runs of a fill (src unused).
void for_each_fill_run(const Layout& to, const Fill& f, const std::function<void(const Run&)>& fn);

}  // namespace ptcfs::ptc
