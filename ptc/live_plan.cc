#include "ptc/live_plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ptc/cluster.h"
#include "ptc/cluster_plan.h"
#include "ptc/plan.h"

namespace ptcfs::ptc {
namespace {

// One node of one GPU per rank: ptc/cluster.h then places rank r on node r.
ClusterConfig one_node_per_rank(int world) {
  ClusterConfig c;
  for (int r = 0; r < world; ++r) c.nodes.push_back({"r" + std::to_string(r), "rank:" + std::to_string(r), 1});
  return c;
}

// Rank -> shard index of a layout (-1 past its world), in Megatron's rank order.
std::vector<int> shard_of_rank(const Parallelism& par, int world) {
  std::vector<int> out(static_cast<size_t>(world), -1);
  for (int p = 0; p < par.pp; ++p)
    for (int d = 0; d < par.dp; ++d)
      for (int t = 0; t < par.tp; ++t) out[static_cast<size_t>(t + par.tp * (d + par.dp * p))] = p * par.tp + t;
  return out;
}

nlohmann::json box_json(const Shape& shape, const SlabRegion& r) {
  Shape start(shape.size(), 0), extent = shape;
  if (r.dim >= 0) {
    start[static_cast<size_t>(r.dim)] = r.lo;
    extent[static_cast<size_t>(r.dim)] = r.len;
  }
  return {{"start", start}, {"shape", extent}};
}

}  // namespace

Result<LivePlan> make_live_plan(const Ptc& ptc, const Parallelism& from, const Parallelism& to) {
  PTC_ASSIGN_OR_RETURN(auto old_layout, Layout::make(ptc, from), "live plan from " + from.to_string());
  PTC_ASSIGN_OR_RETURN(auto new_layout, Layout::make(ptc, to), "live plan to " + to.to_string());
  const int world = std::max(from.world(), to.world());
  const ClusterConfig cluster = one_node_per_rank(world);
  ClusterHoldings h;
  h.num_nodes = world;
  PTC_ASSIGN_OR_RETURN(h.src_nodes, shard_nodes(old_layout, cluster));
  PTC_ASSIGN_OR_RETURN(h.dst_nodes, shard_nodes(new_layout, cluster));
  PTC_ASSIGN_OR_RETURN(auto cp, make_cluster_plan(old_layout, new_layout, h));

  LivePlan out;
  std::vector<uint64_t> per_rank;
  out.bytes_min = min_transfer_bytes(old_layout, new_layout, h, &per_rank);
  const auto old_shard = shard_of_rank(from, world), new_shard = shard_of_rank(to, world);
  for (int r = 0; r < world; ++r)
    out.ranks.push_back(
        {old_shard[static_cast<size_t>(r)], new_shard[static_cast<size_t>(r)], per_rank[static_cast<size_t>(r)], 0, 0});
  for (const Copy& c : cp.copies) {
    const ShardId dst_id = new_layout.shards()[c.dst_shard];
    const Slice& dst = new_layout.slices(dst_id)[c.dst_slice];
    const TensorSpec& spec = new_layout.tensor(dst);
    const int k = slab_dim(spec);
    LiveMove m;
    m.tensor = c.tensor;
    m.dst_rank = c.dst_node;
    m.src_rank = c.transfer >= 0 ? cp.transfers[static_cast<size_t>(c.transfer)].src_node : c.dst_node;
    m.src = {k, c.src_lo, c.len};
    m.dst = {k, c.dst_lo, c.len};
    m.bytes = static_cast<uint64_t>(c.len) * slab_unit_bytes(spec, dst.local_shape);
    if (m.src_rank != m.dst_rank) {
      out.ranks[static_cast<size_t>(m.src_rank)].sent += m.bytes;
      out.ranks[static_cast<size_t>(m.dst_rank)].received += m.bytes;
    }
    out.moves.push_back(m);
  }
  // A live move's source must be the holder's own old shard: with one shard per rank, the
  // copy's source shard is the one its source rank holds.
  for (size_t i = 0; i < out.moves.size(); ++i) {
    const Copy& c = cp.copies[i];
    if (static_cast<int>(c.src_shard) != out.ranks[static_cast<size_t>(out.moves[i].src_rank)].old_shard)
      return Status(Code::kInternal, "live plan: a move of " + ptc.tensors[c.tensor].name + " reads shard " +
                                         old_layout.shards()[c.src_shard].name() + " that rank " +
                                         std::to_string(out.moves[i].src_rank) + " does not hold");
  }
  return out;
}

std::string live_plan_json(const Ptc& ptc, const Parallelism& from, const Parallelism& to, const LivePlan& plan) {
  auto old_layout = Layout::make(ptc, from);
  auto new_layout = Layout::make(ptc, to);
  if (!old_layout || !new_layout) return "{}";  // make_live_plan accepted both already
  const auto local_shape = [&](const Layout& l, int shard, uint32_t tensor) -> const Shape& {
    const ShardId id = l.shards()[static_cast<size_t>(shard)];
    return l.slices(id)[static_cast<size_t>(l.find_slice(id, tensor))].local_shape;
  };
  nlohmann::json moves = nlohmann::json::array();
  for (const LiveMove& m : plan.moves) {
    const LiveRank& s = plan.ranks[static_cast<size_t>(m.src_rank)];
    const LiveRank& d = plan.ranks[static_cast<size_t>(m.dst_rank)];
    moves.push_back({{"tensor", ptc.tensors[m.tensor].name},
                     {"src_rank", m.src_rank},
                     {"dst_rank", m.dst_rank},
                     {"src", box_json(local_shape(*old_layout, s.old_shard, m.tensor), m.src)},
                     {"dst", box_json(local_shape(*new_layout, d.new_shard, m.tensor), m.dst)},
                     {"bytes", m.bytes}});
  }
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const LiveRank& lr = plan.ranks[r];
    nlohmann::json shapes = nlohmann::json::object();
    if (lr.new_shard >= 0) {
      const ShardId id = new_layout->shards()[static_cast<size_t>(lr.new_shard)];
      for (const Slice& sl : new_layout->slices(id)) shapes[new_layout->tensor(sl).name] = sl.local_shape;
    }
    const auto shard_name = [](const Layout& l, int s) -> nlohmann::json {
      if (s < 0) return nullptr;
      return l.shards()[static_cast<size_t>(s)].name();
    };
    ranks.push_back({{"rank", r},
                     {"old_shard", shard_name(*old_layout, lr.old_shard)},
                     {"new_shard", shard_name(*new_layout, lr.new_shard)},
                     {"new_shapes", shapes},
                     {"min", lr.min},
                     {"sent", lr.sent},
                     {"received", lr.received}});
  }
  nlohmann::json j = {{"from", from.to_string()},
                      {"to", to.to_string()},
                      {"bytes_min", plan.bytes_min},
                      {"ranks", ranks},
                      {"moves", moves}};
  return j.dump() + "\n";
}

}  // namespace ptcfs::ptc
