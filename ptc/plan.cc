#include "ptc/plan.h"

#include <algorithm>
#include <tuple>

namespace ptc {

Holdings Holdings::single_node(const Layout& from, const Layout& to) {
  Holdings h;
  h.src_nodes.assign(from.shards().size(), std::vector<int>{0});
  h.dst_node.assign(to.shards().size(), 0);
  h.num_nodes = 1;
  return h;
}

int slab_dim(const TensorSpec& t) {
  if (t.shape.empty()) return -1;
  return t.tp_dim ? *t.tp_dim : 0;
}

uint64_t slab_unit_bytes(const TensorSpec& t, const Shape& local_shape) {
  const int k = slab_dim(t);
  uint64_t n = dtype_size(t.dtype);
  for (size_t d = 0; d < local_shape.size(); ++d)
    if (static_cast<int>(d) != k) n *= static_cast<uint64_t>(local_shape[d]);
  return n;
}

SlabGeometry slab_geometry(const TensorSpec& t, const Shape& local_shape) {
  const int k = slab_dim(t);
  SlabGeometry g;
  g.inner = dtype_size(t.dtype);
  for (int d = 0; d < static_cast<int>(local_shape.size()); ++d) {
    const auto n = static_cast<uint64_t>(local_shape[static_cast<size_t>(d)]);
    if (d < k) g.rows *= n;
    else if (d > k) g.inner *= n;
    else g.extent = local_shape[static_cast<size_t>(d)];
  }
  return g;
}

namespace {

// A piece as an interval along the slab dimension.
struct Interval {
  int64_t glo, ghi;  // global
  int64_t llo;       // local start
};

std::vector<Interval> intervals(const TensorSpec& spec, const Slice& s) {
  const int k = slab_dim(spec);
  std::vector<Interval> out;
  for (const auto& p : s.pieces) {
    if (k < 0) out.push_back({0, 1, 0});
    else out.push_back({p.global.lo[k], p.global.hi[k], p.local.lo[k]});
  }
  return out;
}

int64_t local_extent(const TensorSpec& spec, const Slice& s) {
  const int k = slab_dim(spec);
  return k < 0 ? 1 : s.local_shape[k];
}

bool same_partitioning(const TensorSpec& a, const TensorSpec& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.tp_dim == b.tp_dim &&
         a.parts == b.parts && a.pad_to == b.pad_to;
}

struct Candidate {
  uint32_t shard, slice;
  Interval iv;
};

}  // namespace

Result<Plan> make_plan(const Layout& from, const Layout& to, const Holdings& h) {
  const auto& ft = from.ptc().tensors;
  const auto& tt = to.ptc().tensors;
  if (ft.size() != tt.size()) return invalid("plan: the two layouts hold different tensors");
  for (size_t i = 0; i < ft.size(); ++i)
    if (!same_partitioning(ft[i], tt[i]))
      return invalid("plan: tensor '" + tt[i].name + "' differs between the two layouts");
  if (h.src_nodes.size() != from.shards().size() || h.dst_node.size() != to.shards().size())
    return invalid("plan: holdings do not match the layouts' shards");
  // Node ids index the per-node load below.
  auto bad_node = [&](int n) { return n < 0 || n >= h.num_nodes; };
  for (const auto& nodes : h.src_nodes)
    if (std::any_of(nodes.begin(), nodes.end(), bad_node))
      return invalid("plan: a source shard is held on a node outside [0, " + std::to_string(h.num_nodes) + ")");
  if (std::any_of(h.dst_node.begin(), h.dst_node.end(), bad_node))
    return invalid("plan: a destination shard is on a node outside [0, " + std::to_string(h.num_nodes) + ")");

  // Source pieces by tensor, skipping shards that no node holds.
  std::vector<std::vector<Candidate>> cands(ft.size());
  for (uint32_t s = 0; s < from.shards().size(); ++s) {
    if (h.src_nodes[s].empty()) continue;
    const auto& slices = from.slices(from.shards()[s]);
    for (uint32_t j = 0; j < slices.size(); ++j)
      for (const auto& iv : intervals(ft[slices[j].tensor], slices[j]))
        cands[slices[j].tensor].push_back({s, j, iv});
  }

  Plan plan;
  std::vector<uint64_t> load(static_cast<size_t>(std::max(1, h.num_nodes)), 0);
  for (uint32_t d = 0; d < to.shards().size(); ++d) {
    const ShardId did = to.shards()[d];
    const int dnode = h.dst_node[d];
    const auto& slices = to.slices(did);
    for (uint32_t j = 0; j < slices.size(); ++j) {
      const Slice& sl = slices[j];
      const TensorSpec& spec = tt[sl.tensor];
      const uint64_t unit = slab_unit_bytes(spec, sl.local_shape);
      plan.bytes_total += to.bytes(sl);
      auto ivs = intervals(spec, sl);
      std::sort(ivs.begin(), ivs.end(), [](const Interval& a, const Interval& b) { return a.llo < b.llo; });
      // Padding: local positions no piece covers.
      int64_t at = 0;
      auto fill_to = [&](int64_t end) {
        if (end > at) {
          plan.fills.push_back(Fill{static_cast<uint32_t>(sl.tensor), d, j, at, end - at, dnode});
          plan.bytes_fill += static_cast<uint64_t>(end - at) * unit;
        }
      };
      for (const Interval& piece : ivs) {
        fill_to(piece.llo);
        for (int64_t x = piece.glo; x < piece.ghi;) {
          const Candidate* best = nullptr;
          int best_node = -1;
          std::tuple<int, int, uint64_t, uint32_t> best_key{};
          for (const Candidate& c : cands[sl.tensor]) {
            if (c.iv.glo > x || c.iv.ghi <= x) continue;
            // The source's node: the destination's own if it holds it, else the least loaded.
            const auto& nodes = h.src_nodes[c.shard];
            int node = nodes.front();
            for (int n : nodes) {
              if (n == dnode) { node = n; break; }
              if (load[n] < load[node]) node = n;
            }
            const std::tuple<int, int, uint64_t, uint32_t> key{node == dnode ? 0 : 1,
                                                                from.shards()[c.shard] == did ? 0 : 1, load[node],
                                                                c.shard};
            if (!best || key < best_key) {
              best = &c;
              best_key = key;
              best_node = node;
            }
          }
          if (!best)
            return error(Code::kUnavailable, "plan: no source holds element " + std::to_string(x) + " of tensor '" + spec.name +
                            "' (a shard is held by no node)");
          const int64_t end = std::min(best->iv.ghi, piece.ghi);
          Copy c;
          c.tensor = static_cast<uint32_t>(sl.tensor);
          c.src_shard = best->shard;
          c.src_slice = best->slice;
          c.dst_shard = d;
          c.dst_slice = j;
          c.dst_node = dnode;
          c.src_node = best_node;
          c.src_lo = best->iv.llo + (x - best->iv.glo);
          c.dst_lo = piece.llo + (x - piece.glo);
          c.len = end - x;
          const uint64_t bytes = static_cast<uint64_t>(c.len) * unit;
          (best_node == dnode ? plan.bytes_local : plan.bytes_remote) += bytes;
          load[best_node] += bytes;
          plan.copies.push_back(c);
          x = end;
        }
        at = piece.llo + (piece.ghi - piece.glo);
      }
      fill_to(local_extent(spec, sl));
    }
  }
  return plan;
}

namespace {
Box slab_box(const Shape& shape, int k, int64_t lo, int64_t len) {
  Box b = Box::of_shape(shape);
  if (k >= 0) {
    b.lo[k] = lo;
    b.hi[k] = lo + len;
  }
  return b;
}
}  // namespace

void for_each_copy_run(const Layout& from, const Layout& to, const Copy& c, const std::function<void(const Run&)>& fn) {
  const TensorSpec& spec = to.ptc().tensors[c.tensor];
  const Slice& ss = from.slices(from.shards()[c.src_shard])[c.src_slice];
  const Slice& ds = to.slices(to.shards()[c.dst_shard])[c.dst_slice];
  const int k = slab_dim(spec);
  const size_t elem = dtype_size(spec.dtype);
  if (k < 0) {
    fn(Run{0, 0, static_cast<int64_t>(elem)});
    return;
  }
  // Work in the destination's local frame: the source slice is shifted along k so that
  // its src_lo lands on dst_lo.
  Box src_full = Box::of_shape(ss.local_shape);
  std::vector<int64_t> shift(src_full.rank(), 0);
  shift[k] = c.dst_lo - c.src_lo;
  for_each_run(slab_box(ds.local_shape, k, c.dst_lo, c.len), src_full.translated(shift), Box::of_shape(ds.local_shape),
               elem, fn);
}

void for_each_fill_run(const Layout& to, const Fill& f, const std::function<void(const Run&)>& fn) {
  const TensorSpec& spec = to.ptc().tensors[f.tensor];
  const Slice& ds = to.slices(to.shards()[f.dst_shard])[f.dst_slice];
  const int k = slab_dim(spec);
  const Box full = Box::of_shape(ds.local_shape);
  for_each_run(slab_box(ds.local_shape, k, f.dst_lo, f.len), full, full, dtype_size(spec.dtype), fn);
}

}  // namespace ptc
