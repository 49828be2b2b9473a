#include "ptc/cluster_plan.h"

#include <algorithm>
#include <map>
#include <span>
#include <tuple>

#include "ptc/fill_gaps.h"

namespace ptcfs::ptc {
namespace {

// Sorted, disjoint, non-empty half-open intervals.
using Interval = std::pair<int64_t, int64_t>;
using Intervals = std::vector<Interval>;
using IntervalSpan = std::span<const Interval>;

// a - b, both sorted and disjoint.
Intervals subtract(IntervalSpan a, IntervalSpan b) {
  Intervals out;
  size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) ++j;
    for (size_t k = j; k < b.size() && b[k].first < hi; ++k) {
      if (b[k].first > lo) out.emplace_back(lo, b[k].first);
      lo = std::max(lo, b[k].second);
    }
    if (lo < hi) out.emplace_back(lo, hi);
  }
  return out;
}

int64_t length(const Intervals& v) {
  int64_t n = 0;
  for (const auto& [lo, hi] : v) n += hi - lo;
  return n;
}

// A piece of a slice as an interval along the slab dimension.
struct PieceIv {
  uint32_t shard, slice;
  int64_t glo, ghi, llo;
};

// The pieces of every slice of a layout, flattened once: reading them from the layout's
// regions costs a few cache misses a piece, and a cluster plan visits each slice many
// times (once per node holding it).
class PieceTable {
 public:
  explicit PieceTable(const Layout& l) {
    first_.reserve(l.shards().size());
    for (uint32_t s = 0; s < l.shards().size(); ++s) {
      const auto& slices = l.slices(l.shards()[s]);
      first_.emplace_back();
      for (uint32_t j = 0; j < slices.size(); ++j) {
        first_.back().push_back(ivs_.size());
        const int k = slab_dim(l.tensor(slices[j]));
        const size_t at = ivs_.size();
        for (const auto& p : slices[j].pieces) {
          if (k < 0)
            ivs_.push_back({s, j, 0, 1, 0});
          else
            ivs_.push_back({s, j, p.global.lo[k], p.global.hi[k], p.local.lo[k]});
        }
        std::sort(ivs_.begin() + static_cast<std::ptrdiff_t>(at), ivs_.end(),
                  [](const PieceIv& a, const PieceIv& b) { return a.llo < b.llo; });
      }
      first_.back().push_back(ivs_.size());
    }
  }
  // The pieces of slice j of shard s, in local order.
  std::span<const PieceIv> of(uint32_t s, uint32_t j) const {
    return {ivs_.data() + first_[s][j], first_[s][j + 1] - first_[s][j]};
  }

 private:
  std::vector<PieceIv> ivs_;
  std::vector<std::vector<size_t>> first_;  // per shard, per slice: index of its first piece (+ end)
};

bool holds(const std::vector<int>& nodes, int n) { return std::find(nodes.begin(), nodes.end(), n) != nodes.end(); }

// Global unit bytes of a tensor along its slab dimension.
uint64_t global_unit(const TensorSpec& t) { return slab_unit_bytes(t, t.shape); }

Status check(const Layout& from, const Layout& to, const ClusterHoldings& h) {
  const auto& ft = from.ptc().tensors;
  const auto& tt = to.ptc().tensors;
  if (ft.size() != tt.size()) return invalid("plan: the two layouts hold different tensors");
  for (size_t i = 0; i < ft.size(); ++i)
    if (ft[i].name != tt[i].name || ft[i].dtype != tt[i].dtype || ft[i].shape != tt[i].shape ||
        ft[i].tp_dim != tt[i].tp_dim || ft[i].parts != tt[i].parts || ft[i].pad_to != tt[i].pad_to)
      return invalid("plan: tensor '" + tt[i].name + "' differs between the two layouts");
  if (h.num_nodes < 1) return invalid("plan: a cluster has at least one node");
  if (h.src_nodes.size() != from.shards().size() || h.dst_nodes.size() != to.shards().size())
    return invalid("plan: holdings do not match the layouts' shards");
  auto bad = [&](const std::vector<std::vector<int>>& v) {
    for (const auto& nodes : v)
      for (int n : nodes)
        if (n < 0 || n >= h.num_nodes) return true;
    return false;
  };
  if (bad(h.src_nodes) || bad(h.dst_nodes))
    return invalid("plan: a shard is placed on a node outside [0, " + std::to_string(h.num_nodes) + ")");
  return Status::ok();
}

// Per tensor: the pieces of every old shard some live node holds.
std::vector<std::vector<PieceIv>> source_pieces(const Layout& from, const PieceTable& pieces,
                                                const ClusterHoldings& h) {
  std::vector<std::vector<PieceIv>> out(from.ptc().tensors.size());
  for (uint32_t s = 0; s < from.shards().size(); ++s) {
    if (h.src_nodes[s].empty()) continue;
    const auto& slices = from.slices(from.shards()[s]);
    for (uint32_t j = 0; j < slices.size(); ++j)
      for (const auto& iv : pieces.of(s, j)) out[slices[j].tensor].push_back(iv);
  }
  return out;
}

// The shards (indices) node n holds, ascending.
std::vector<uint32_t> shards_on(const std::vector<std::vector<int>>& nodes_of, int n) {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < nodes_of.size(); ++s)
    if (holds(nodes_of[s], n)) out.push_back(s);
  return out;
}

// need(n, X) or have(n, X) for every tensor X: the union of the pieces of the shards node n
// holds, flattened (X's intervals are ivs[first[X], first[X + 1])): two allocations, not one
// per tensor.
struct TensorUnions {
  std::vector<size_t> first;
  Intervals ivs;
  IntervalSpan operator[](size_t x) const { return {ivs.data() + first[x], first[x + 1] - first[x]}; }
};

// Nodes holding the same shards (DP replicas of a stage) have the same unions, so each
// distinct set of shards is computed once: with 1,024 GPUs that is 8-16x less work.
class Unions {
 public:
  Unions(const Layout& l, const PieceTable& pieces, const std::vector<std::vector<int>>& nodes_of)
      : l_(l), pieces_(pieces), nodes_of_(nodes_of) {}

  const TensorUnions& of(int n) {
    auto [it, fresh] = cache_.try_emplace(shards_on(nodes_of_, n));
    if (fresh) {
      struct Piece {
        size_t tensor;
        int64_t lo, hi;
        bool operator<(const Piece& o) const { return std::tie(tensor, lo, hi) < std::tie(o.tensor, o.lo, o.hi); }
      };
      std::vector<Piece> all;
      for (uint32_t s : it->first) {
        const auto& slices = l_.slices(l_.shards()[s]);
        for (uint32_t j = 0; j < slices.size(); ++j)
          for (const auto& iv : pieces_.of(s, j))
            if (iv.glo < iv.ghi) all.push_back({slices[j].tensor, iv.glo, iv.ghi});
      }
      std::sort(all.begin(), all.end());
      TensorUnions& u = it->second;
      const size_t nt = l_.ptc().tensors.size();
      u.first.assign(nt + 1, 0);
      size_t x = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        const Piece& p = all[i];
        while (x < p.tensor) u.first[++x] = u.ivs.size();
        const bool joins = i > 0 && all[i - 1].tensor == p.tensor && p.lo <= u.ivs.back().second;
        if (joins)
          u.ivs.back().second = std::max(u.ivs.back().second, p.hi);
        else
          u.ivs.emplace_back(p.lo, p.hi);
      }
      while (x < nt) u.first[++x] = u.ivs.size();
    }
    return it->second;
  }

 private:
  const Layout& l_;
  const PieceTable& pieces_;
  const std::vector<std::vector<int>>& nodes_of_;
  std::map<std::vector<uint32_t>, TensorUnions> cache_;
};

// The cluster plan of cluster_plan.h, built node by node: first the transfers into node n
// (need - have, each slab from the least-loaded holder), then the copies into the new shards
// n holds. It carries the per-node load (bytes assigned to senders so far) across nodes.
class ClusterSweep {
 public:
  ClusterSweep(const Layout& from, const Layout& to, const ClusterHoldings& h)
      : from_(from),
        to_(to),
        h_(h),
        to_pieces_(to),
        from_pieces_(from),
        sources_(source_pieces(from, from_pieces_, h)),
        load_(static_cast<size_t>(h.num_nodes), 0),
        needs_(to, to_pieces_, h.dst_nodes),
        haves_(from, from_pieces_, h.src_nodes),
        held_(from.shards().size()),
        tr_range_(to.ptc().tensors.size(), {0, 0}) {}

  // Adds the transfers, copies and fills into node n to `plan`.
  Status add_node(int n, Plan& plan);

 private:
  struct Sender {
    const PieceIv* piece = nullptr;  // null: no live node holds the element
    int node = -1;
  };
  // The transfers into n of every tensor; sets tr_range_.
  Status add_transfers(int n, Plan& plan);
  // The source piece of tensor x holding element `at` on the least-loaded node (ties to the
  // lower node id, then shard index).
  Sender best_sender(size_t x, int64_t at) const;
  // The copies and fills of slice j of new shard d, on node n.
  Status add_slice(int n, uint32_t d, uint32_t j, Plan& plan);
  // The source piece of `tensor` on node n (held_) covering element x, preferring shard id
  // `did`, then the lower shard index; null when n holds none.
  const PieceIv* local_source(size_t tensor, int64_t x, ShardId did) const;

  const Layout& from_;
  const Layout& to_;
  const ClusterHoldings& h_;
  const PieceTable to_pieces_, from_pieces_;
  const std::vector<std::vector<PieceIv>> sources_;
  std::vector<uint64_t> load_;
  Unions needs_, haves_;
  std::vector<char> held_;  // old shards the current node holds
  // Per tensor, the current node's transfers: [first, last) in plan.transfers, sorted by glo.
  std::vector<std::pair<size_t, size_t>> tr_range_;
};

Status ClusterSweep::add_node(int n, Plan& plan) {
  for (uint32_t s = 0; s < held_.size(); ++s) held_[s] = holds(h_.src_nodes[s], n);
  PTC_RETURN_IF_ERROR(add_transfers(n, plan));
  // Copies into every new shard n holds: a local source where there is one, else the
  // transfer that brought the element.
  for (uint32_t d = 0; d < to_.shards().size(); ++d) {
    if (!holds(h_.dst_nodes[d], n)) continue;
    for (uint32_t j = 0; j < to_.slices(to_.shards()[d]).size(); ++j) PTC_RETURN_IF_ERROR(add_slice(n, d, j, plan));
  }
  return Status::ok();
}

ClusterSweep::Sender ClusterSweep::best_sender(size_t x, int64_t at) const {
  Sender best;
  std::tuple<uint64_t, int, uint32_t> best_key{};
  for (const PieceIv& c : sources_[x]) {
    if (c.glo > at || c.ghi <= at) continue;
    int node = -1;
    for (int m : h_.src_nodes[c.shard])
      if (node < 0 || load_[static_cast<size_t>(m)] < load_[static_cast<size_t>(node)] ||
          (load_[static_cast<size_t>(m)] == load_[static_cast<size_t>(node)] && m < node))
        node = m;
    const std::tuple<uint64_t, int, uint32_t> key{load_[static_cast<size_t>(node)], node, c.shard};
    if (!best.piece || key < best_key) {
      best = {&c, node};
      best_key = key;
    }
  }
  return best;
}

Status ClusterSweep::add_transfers(int n, Plan& plan) {
  const auto& tensors = to_.ptc().tensors;
  const auto& need = needs_.of(n);
  const auto& have = haves_.of(n);
  for (size_t x = 0; x < tensors.size(); ++x) {
    tr_range_[x].first = plan.transfers.size();
    const uint64_t unit = global_unit(tensors[x]);
    for (auto [lo, hi] : subtract(need[x], have[x])) {
      for (int64_t at = lo; at < hi;) {
        const Sender best = best_sender(x, at);
        if (!best.piece)
          return error(Code::kUnavailable, "plan: no live node holds element " + std::to_string(at) + " of tensor '" +
                                               tensors[x].name + "' (its shards' nodes are all down)");
        const int64_t end = std::min(best.piece->ghi, hi);
        Transfer t;
        t.tensor = static_cast<uint32_t>(x);
        t.src_node = best.node;
        t.dst_node = n;
        t.src_shard = best.piece->shard;
        t.src_slice = best.piece->slice;
        t.src_lo = best.piece->llo + (at - best.piece->glo);
        t.glo = at;
        t.len = end - at;
        t.bytes = static_cast<uint64_t>(t.len) * unit;
        load_[static_cast<size_t>(best.node)] += t.bytes;
        plan.bytes_remote += t.bytes;
        plan.transfers.push_back(t);
        at = end;
      }
    }
    tr_range_[x].second = plan.transfers.size();
  }
  return Status::ok();
}

const PieceIv* ClusterSweep::local_source(size_t tensor, int64_t x, ShardId did) const {
  const PieceIv* best = nullptr;
  std::pair<int, uint32_t> best_key{};
  for (const PieceIv& s : sources_[tensor]) {
    if (s.glo > x || s.ghi <= x || !held_[s.shard]) continue;
    const std::pair<int, uint32_t> key{from_.shards()[s.shard] == did ? 0 : 1, s.shard};
    if (!best || key < best_key) {
      best = &s;
      best_key = key;
    }
  }
  return best;
}

Status ClusterSweep::add_slice(int n, uint32_t d, uint32_t j, Plan& plan) {
  const ShardId did = to_.shards()[d];
  const Slice& sl = to_.slices(did)[j];
  const TensorSpec& spec = to_.ptc().tensors[sl.tensor];
  const uint64_t unit = slab_unit_bytes(spec, sl.local_shape);
  plan.bytes_total += to_.bytes(sl);
  const auto ivs = to_pieces_.of(d, j);
  const int64_t extent = slab_dim(spec) < 0 ? 1 : sl.local_shape[static_cast<size_t>(slab_dim(spec))];
  fill_gaps(ivs, extent, [&](int64_t lo, int64_t len) {
    plan.fills.push_back(Fill{static_cast<uint32_t>(sl.tensor), d, j, lo, len, n});
    plan.bytes_fill += static_cast<uint64_t>(len) * unit;
  });
  for (const PieceIv& piece : ivs) {
    for (int64_t x = piece.glo; x < piece.ghi;) {
      Copy c;
      c.tensor = static_cast<uint32_t>(sl.tensor);
      c.dst_shard = d;
      c.dst_slice = j;
      c.dst_node = n;
      c.dst_lo = piece.llo + (x - piece.glo);
      int64_t end;
      if (const PieceIv* best = local_source(sl.tensor, x, did)) {
        end = std::min(best->ghi, piece.ghi);
        c.src_shard = best->shard;
        c.src_slice = best->slice;
        c.src_node = n;
        c.src_lo = best->llo + (x - best->glo);
        plan.bytes_local += static_cast<uint64_t>(end - x) * unit;
      } else {
        // need - have is covered by the transfers into n, which are sorted and disjoint.
        const auto first = plan.transfers.begin() + static_cast<std::ptrdiff_t>(tr_range_[sl.tensor].first);
        const auto last = plan.transfers.begin() + static_cast<std::ptrdiff_t>(tr_range_[sl.tensor].second);
        auto it = std::upper_bound(first, last, x, [](int64_t v, const Transfer& t) { return v < t.glo; });
        if (it == first || std::prev(it)->glo + std::prev(it)->len <= x)
          return internal("plan: element " + std::to_string(x) + " of tensor '" + spec.name +
                          "' is neither held nor received by node " + std::to_string(n));
        const Transfer& t = *std::prev(it);
        end = std::min(t.glo + t.len, piece.ghi);
        c.src_shard = t.src_shard;
        c.src_slice = t.src_slice;
        c.src_node = t.src_node;
        c.src_lo = t.src_lo + (x - t.glo);
        c.transfer = static_cast<int32_t>(std::prev(it) - plan.transfers.begin());
      }
      c.len = end - x;
      plan.copies.push_back(c);
      x = end;
    }
  }
  return Status::ok();
}

}  // namespace

uint64_t min_transfer_bytes(const Layout& from, const Layout& to, const ClusterHoldings& h,
                            std::vector<uint64_t>* per_node) {
  if (per_node) per_node->assign(static_cast<size_t>(std::max(1, h.num_nodes)), 0);
  uint64_t total = 0;
  const PieceTable to_pieces(to), from_pieces(from);
  Unions needs(to, to_pieces, h.dst_nodes), haves(from, from_pieces, h.src_nodes);
  for (int n = 0; n < h.num_nodes; ++n) {
    const auto& need = needs.of(n);
    const auto& have = haves.of(n);
    for (size_t x = 0; x + 1 < need.first.size(); ++x) {
      const uint64_t b = static_cast<uint64_t>(length(subtract(need[x], have[x]))) * global_unit(to.ptc().tensors[x]);
      total += b;
      if (per_node) (*per_node)[static_cast<size_t>(n)] += b;
    }
  }
  return total;
}

Result<Plan> make_cluster_plan(const Layout& from, const Layout& to, const ClusterHoldings& h) {
  PTC_RETURN_IF_ERROR(check(from, to, h));
  ClusterSweep sweep(from, to, h);
  Plan plan;
  for (int n = 0; n < h.num_nodes; ++n) PTC_RETURN_IF_ERROR(sweep.add_node(n, plan));
  return plan;
}

Plan node_part(const Plan& plan, int node) {
  Plan out;
  std::vector<int32_t> renum(plan.transfers.size(), -1);
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    if (plan.transfers[i].dst_node != node) continue;
    renum[i] = static_cast<int32_t>(out.transfers.size());
    out.transfers.push_back(plan.transfers[i]);
    out.bytes_remote += plan.transfers[i].bytes;
  }
  for (const Copy& c : plan.copies) {
    if (c.dst_node != node) continue;
    Copy k = c;
    if (k.transfer >= 0) k.transfer = renum[static_cast<size_t>(k.transfer)];
    out.copies.push_back(k);
  }
  for (const Fill& f : plan.fills)
    if (f.dst_node == node) out.fills.push_back(f);
  return out;
}

}  // namespace ptcfs::ptc
