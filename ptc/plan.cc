#include "ptc/plan.h"

#include <algorithm>
#include <tuple>

#include "ptc/fill_gaps.h"

namespace ptcfs::ptc {

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
    if (d < k)
      g.rows *= n;
    else if (d > k)
      g.inner *= n;
    else
      g.extent = local_shape[static_cast<size_t>(d)];
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
    if (k < 0)
      out.push_back({0, 1, 0});
    else
      out.push_back({p.global.lo[k], p.global.hi[k], p.local.lo[k]});
  }
  return out;
}

int64_t local_extent(const TensorSpec& spec, const Slice& s) {
  const int k = slab_dim(spec);
  return k < 0 ? 1 : s.local_shape[k];
}

bool same_partitioning(const TensorSpec& a, const TensorSpec& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.tp_dim == b.tp_dim && a.parts == b.parts &&
         a.pad_to == b.pad_to;
}

struct Candidate {
  uint32_t shard, slice;
  Interval iv;
};

Status check(const Layout& from, const Layout& to, const Holdings& h) {
  const auto& ft = from.ptc().tensors;
  const auto& tt = to.ptc().tensors;
  if (ft.size() != tt.size()) return invalid("plan: the two layouts hold different tensors");
  for (size_t i = 0; i < ft.size(); ++i)
    if (!same_partitioning(ft[i], tt[i]))
      return invalid("plan: tensor '" + tt[i].name + "' differs between the two layouts");
  if (h.src_nodes.size() != from.shards().size() || h.dst_node.size() != to.shards().size())
    return invalid("plan: holdings do not match the layouts' shards");
  // Node ids index the per-node load of the sweep.
  auto bad_node = [&](int n) { return n < 0 || n >= h.num_nodes; };
  for (const auto& nodes : h.src_nodes)
    if (std::any_of(nodes.begin(), nodes.end(), bad_node))
      return invalid("plan: a source shard is held on a node outside [0, " + std::to_string(h.num_nodes) + ")");
  if (std::any_of(h.dst_node.begin(), h.dst_node.end(), bad_node))
    return invalid("plan: a destination shard is on a node outside [0, " + std::to_string(h.num_nodes) + ")");
  return Status::ok();
}

// Source pieces by tensor, skipping shards that no node holds.
std::vector<std::vector<Candidate>> candidates(const Layout& from, const Holdings& h) {
  const auto& ft = from.ptc().tensors;
  std::vector<std::vector<Candidate>> cands(ft.size());
  for (uint32_t s = 0; s < from.shards().size(); ++s) {
    if (h.src_nodes[s].empty()) continue;
    const auto& slices = from.slices(from.shards()[s]);
    for (uint32_t j = 0; j < slices.size(); ++j)
      for (const auto& iv : intervals(ft[slices[j].tensor], slices[j])) cands[slices[j].tensor].push_back({s, j, iv});
  }
  return cands;
}

// The sweep of plan.h over the destination slices, in order. It carries the per-node load
// (bytes assigned so far) from one slice to the next.
class Sweep {
 public:
  Sweep(const Layout& from, const Layout& to, const Holdings& h)
      : from_(from),
        to_(to),
        h_(h),
        cands_(candidates(from, h)),
        load_(static_cast<size_t>(std::max(1, h.num_nodes)), 0) {}

  // Adds the fills and copies of slice j of destination shard d to `plan`.
  Status add_slice(uint32_t d, uint32_t j, Plan& plan);

 private:
  struct Choice {
    const Candidate* cand = nullptr;  // null: no source covers the point
    int node = -1;                    // the node it is read from
  };
  // The covering source best at point x of `tensor` for destination shard `did` on `dnode`.
  Choice best_source(size_t tensor, int64_t x, int dnode, ShardId did) const;

  const Layout& from_;
  const Layout& to_;
  const Holdings& h_;
  const std::vector<std::vector<Candidate>> cands_;
  std::vector<uint64_t> load_;
};

Sweep::Choice Sweep::best_source(size_t tensor, int64_t x, int dnode, ShardId did) const {
  Choice best;
  std::tuple<int, int, uint64_t, uint32_t> best_key{};
  for (const Candidate& c : cands_[tensor]) {
    if (c.iv.glo > x || c.iv.ghi <= x) continue;
    // The source's node: the destination's own if it holds it, else the least loaded.
    const auto& nodes = h_.src_nodes[c.shard];
    int node = nodes.front();
    for (int n : nodes) {
      if (n == dnode) {
        node = n;
        break;
      }
      if (load_[n] < load_[node]) node = n;
    }
    const std::tuple<int, int, uint64_t, uint32_t> key{node == dnode ? 0 : 1, from_.shards()[c.shard] == did ? 0 : 1,
                                                       load_[node], c.shard};
    if (!best.cand || key < best_key) {
      best = {&c, node};
      best_key = key;
    }
  }
  return best;
}

Status Sweep::add_slice(uint32_t d, uint32_t j, Plan& plan) {
  const ShardId did = to_.shards()[d];
  const int dnode = h_.dst_node[d];
  const Slice& sl = to_.slices(did)[j];
  const TensorSpec& spec = to_.ptc().tensors[sl.tensor];
  const uint64_t unit = slab_unit_bytes(spec, sl.local_shape);
  plan.bytes_total += to_.bytes(sl);
  auto ivs = intervals(spec, sl);
  std::sort(ivs.begin(), ivs.end(), [](const Interval& a, const Interval& b) { return a.llo < b.llo; });
  fill_gaps(ivs, local_extent(spec, sl), [&](int64_t lo, int64_t len) {
    plan.fills.push_back(Fill{static_cast<uint32_t>(sl.tensor), d, j, lo, len, dnode});
    plan.bytes_fill += static_cast<uint64_t>(len) * unit;
  });
  for (const Interval& piece : ivs) {
    for (int64_t x = piece.glo; x < piece.ghi;) {
      const Choice best = best_source(sl.tensor, x, dnode, did);
      if (!best.cand)
        return error(Code::kUnavailable, "plan: no source holds element " + std::to_string(x) + " of tensor '" +
                                             spec.name + "' (a shard is held by no node)");
      const int64_t end = std::min(best.cand->iv.ghi, piece.ghi);
      Copy c;
      c.tensor = static_cast<uint32_t>(sl.tensor);
      c.src_shard = best.cand->shard;
      c.src_slice = best.cand->slice;
      c.dst_shard = d;
      c.dst_slice = j;
      c.dst_node = dnode;
      c.src_node = best.node;
      c.src_lo = best.cand->iv.llo + (x - best.cand->iv.glo);
      c.dst_lo = piece.llo + (x - piece.glo);
      c.len = end - x;
      const uint64_t bytes = static_cast<uint64_t>(c.len) * unit;
      (best.node == dnode ? plan.bytes_local : plan.bytes_remote) += bytes;
      load_[best.node] += bytes;
      plan.copies.push_back(c);
      x = end;
    }
  }
  return Status::ok();
}

}  // namespace

Result<Plan> make_plan(const Layout& from, const Layout& to, const Holdings& h) {
  PTC_RETURN_IF_ERROR(check(from, to, h));
  Sweep sweep(from, to, h);
  Plan plan;
  for (uint32_t d = 0; d < to.shards().size(); ++d)
    for (uint32_t j = 0; j < to.slices(to.shards()[d]).size(); ++j) PTC_RETURN_IF_ERROR(sweep.add_slice(d, j, plan));
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

}  // namespace ptcfs::ptc
