// Test support for the make_cluster_plan tests (cluster_plan_test.cc), on top of plan_support.h:
//
// - cluster plans as rows of plain integers, for exact comparison;
// - a reference executor that carries a cluster plan out as the nodes would: each transfer's
//   slab cut once from its source slice, every (new shard, node) instance built from local
//   sources, received slabs and fills, and compared with the oracle;
// - a generator of random placements on several nodes.
//
// Header-only: the helpers use Catch2 assertions, so call them only from inside a test.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan_support.h"
#include "ptc/cluster_plan.h"

namespace plan_support {

// {tensor, src_node, dst_node, src_shard, src_slice, src_lo, glo, len, bytes}
using TransferRow = std::array<int64_t, 9>;
// {tensor, src_shard, src_slice, src_node, dst_shard, dst_slice, dst_node, src_lo, dst_lo, len, transfer}
using ClusterCopyRow = std::array<int64_t, 11>;
// {tensor, dst_shard, dst_slice, dst_node, dst_lo, len}
using ClusterFillRow = std::array<int64_t, 6>;

inline std::vector<TransferRow> transfer_rows(const ptcfs::ptc::Plan& p) {
  std::vector<TransferRow> out;
  for (const ptcfs::ptc::Transfer& t : p.transfers)
    out.push_back({t.tensor, t.src_node, t.dst_node, t.src_shard, t.src_slice, t.src_lo, t.glo, t.len,
                   static_cast<int64_t>(t.bytes)});
  return out;
}

inline std::vector<ClusterCopyRow> cluster_copy_rows(const ptcfs::ptc::Plan& p) {
  std::vector<ClusterCopyRow> out;
  for (const ptcfs::ptc::Copy& c : p.copies)
    out.push_back({c.tensor, c.src_shard, c.src_slice, c.src_node, c.dst_shard, c.dst_slice, c.dst_node, c.src_lo,
                   c.dst_lo, c.len, c.transfer});
  return out;
}

inline std::vector<ClusterFillRow> cluster_fill_rows(const ptcfs::ptc::Plan& p) {
  std::vector<ClusterFillRow> out;
  for (const ptcfs::ptc::Fill& f : p.fills)
    out.push_back({f.tensor, f.dst_shard, f.dst_slice, f.dst_node, f.dst_lo, f.len});
  return out;
}

inline ptcfs::ptc::Plan cluster_plan_of(const ptcfs::ptc::Layout& from, const ptcfs::ptc::Layout& to,
                                        const ptcfs::ptc::ClusterHoldings& h) {
  auto r = make_cluster_plan(from, to, h);
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  return *r;
}

inline bool holds(const std::vector<int>& nodes, int n) {
  return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
}

// Bytes [lo, lo + len) along the slab dimension of a buffer of geometry g, row by row.
inline void copy_slab(const std::byte* src, const ptcfs::ptc::SlabGeometry& gs, int64_t src_lo, std::byte* dst,
                      const ptcfs::ptc::SlabGeometry& gd, int64_t dst_lo, int64_t len) {
  const auto n = static_cast<size_t>(len) * gd.inner;
  for (uint64_t r = 0; r < gd.rows; ++r) {
    const uint64_t s = (r * static_cast<uint64_t>(gs.extent) + static_cast<uint64_t>(src_lo)) * gs.inner;
    const uint64_t d = (r * static_cast<uint64_t>(gd.extent) + static_cast<uint64_t>(dst_lo)) * gd.inner;
    if (src)
      std::memcpy(dst + d, src + s, n);
    else
      std::memset(dst + d, 0, n);
  }
}

// Whether a piece of an old shard on `node` covers any of [glo, glo + len) of tensor `ti`.
inline bool node_holds_any(const ptcfs::ptc::Layout& from, const ptcfs::ptc::ClusterHoldings& h, int node, size_t ti,
                           int64_t glo, int64_t len) {
  const int k = ptcfs::ptc::slab_dim(from.ptc().tensors[ti]);
  for (size_t s = 0; s < from.shards().size(); ++s) {
    const int j = from.find_slice(from.shards()[s], ti);
    if (j < 0 || !holds(h.src_nodes[s], node)) continue;
    for (const ptcfs::ptc::Piece& pc : from.slices(from.shards()[s])[static_cast<size_t>(j)].pieces) {
      const int64_t lo = k < 0 ? 0 : pc.global.lo[k], hi = k < 0 ? 1 : pc.global.hi[k];
      if (lo < glo + len && glo < hi) return true;
    }
  }
  return false;
}

// The reference executor. Every source slice holds the oracle's bytes; each transfer cuts
// its slab from its source slice once; every instance (new shard d on node n) is built from
// the copies and fills with dst_node n. Returns "" when every instance equals the oracle's
// slices, every byte written exactly once, and the byte counts add up; else the first problem.
inline std::string execution_problem(const ptcfs::ptc::Layout& from, const ptcfs::ptc::Layout& to,
                                     const ptcfs::ptc::ClusterHoldings& h, const ptcfs::ptc::Plan& plan) {
  const auto full = full_tensors(from.ptc());
  const Buffers src = oracle(from, full), want = oracle(to, full);
  const auto& tensors = from.ptc().tensors;
  const auto& fs = from.shards();
  const auto& ts = to.shards();

  std::vector<Bytes> sent;
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const ptcfs::ptc::Transfer& t = plan.transfers[i];
    const std::string at = "transfer " + std::to_string(i);
    if (t.src_shard >= fs.size() || t.src_slice >= from.slices(fs[t.src_shard]).size()) return at + ": out of range";
    const ptcfs::ptc::Slice& ss = from.slices(fs[t.src_shard])[t.src_slice];
    if (ss.tensor != t.tensor) return at + ": tensor differs from its source slice's";
    if (!holds(h.src_nodes[t.src_shard], t.src_node)) return at + ": src_node does not hold the source shard";
    if (t.src_node == t.dst_node || t.dst_node < 0 || t.dst_node >= h.num_nodes) return at + ": bad dst_node";
    const ptcfs::ptc::SlabGeometry g = ptcfs::ptc::slab_geometry(tensors[t.tensor], ss.local_shape);
    if (t.len <= 0 || t.src_lo < 0 || t.src_lo + t.len > g.extent) return at + ": slab outside its source slice";
    // glo is where src_lo lies in the global tensor, and the slab stays inside one piece.
    const int k = ptcfs::ptc::slab_dim(tensors[t.tensor]);
    bool in_piece = false;
    for (const ptcfs::ptc::Piece& pc : ss.pieces) {
      const int64_t llo = k < 0 ? 0 : pc.local.lo[k], lhi = k < 0 ? 1 : pc.local.hi[k];
      const int64_t glo = k < 0 ? 0 : pc.global.lo[k];
      if (llo <= t.src_lo && t.src_lo + t.len <= lhi && t.glo == glo + (t.src_lo - llo)) in_piece = true;
    }
    if (!in_piece) return at + ": glo/src_lo/len do not lie in one source piece";
    if (node_holds_any(from, h, t.dst_node, t.tensor, t.glo, t.len)) return at + ": dst_node already holds some of it";
    Bytes slab(g.rows * static_cast<uint64_t>(t.len) * g.inner);
    copy_slab(src[t.src_shard][t.src_slice].data(), g, t.src_lo, slab.data(), {g.rows, g.inner, t.len}, 0, t.len);
    if (slab.size() != t.bytes)
      return at + ": bytes " + std::to_string(t.bytes) + ", slab " + std::to_string(slab.size());
    sent.push_back(std::move(slab));
  }

  // Instances, keyed by (new shard, node).
  std::map<std::pair<uint32_t, int>, std::vector<Bytes>> got;
  std::map<std::pair<uint32_t, int>, std::vector<std::vector<uint8_t>>> writes;
  uint64_t total = 0, local = 0, fill = 0;
  for (uint32_t d = 0; d < ts.size(); ++d)
    for (int n : h.dst_nodes[d])
      for (const ptcfs::ptc::Slice& sl : to.slices(ts[d])) {
        got[{d, n}].emplace_back(to.bytes(sl), std::byte{0xCD});
        writes[{d, n}].emplace_back(to.bytes(sl), 0);
        total += to.bytes(sl);
      }
  auto count = [&](std::vector<uint8_t>& w, const ptcfs::ptc::SlabGeometry& g, int64_t lo, int64_t len) {
    for (uint64_t r = 0; r < g.rows; ++r)
      for (uint64_t b = 0; b < static_cast<uint64_t>(len) * g.inner; ++b)
        ++w[(r * static_cast<uint64_t>(g.extent) + static_cast<uint64_t>(lo)) * g.inner + b];
    return g.rows * static_cast<uint64_t>(len) * g.inner;
  };

  for (size_t i = 0; i < plan.copies.size(); ++i) {
    const ptcfs::ptc::Copy& c = plan.copies[i];
    const std::string at = "copy " + std::to_string(i);
    const auto key = std::make_pair(c.dst_shard, static_cast<int>(c.dst_node));
    if (!got.count(key) || c.dst_slice >= got[key].size()) return at + ": no such destination instance";
    if (c.src_shard >= fs.size() || c.src_slice >= from.slices(fs[c.src_shard]).size()) return at + ": out of range";
    const ptcfs::ptc::Slice& ss = from.slices(fs[c.src_shard])[c.src_slice];
    const ptcfs::ptc::Slice& ds = to.slices(ts[c.dst_shard])[c.dst_slice];
    if (ss.tensor != c.tensor || ds.tensor != c.tensor) return at + ": tensor differs from its slices'";
    const ptcfs::ptc::SlabGeometry gd = ptcfs::ptc::slab_geometry(tensors[c.tensor], ds.local_shape);
    ptcfs::ptc::SlabGeometry gs = ptcfs::ptc::slab_geometry(tensors[c.tensor], ss.local_shape);
    const std::byte* from_bytes = src[c.src_shard][c.src_slice].data();
    int64_t lo = c.src_lo;
    if (c.transfer < 0) {
      if (c.src_node != c.dst_node || !holds(h.src_nodes[c.src_shard], c.dst_node))
        return at + ": local copy from a shard its node does not hold";
    } else {
      if (static_cast<size_t>(c.transfer) >= plan.transfers.size()) return at + ": transfer out of range";
      const ptcfs::ptc::Transfer& t = plan.transfers[static_cast<size_t>(c.transfer)];
      if (t.dst_node != c.dst_node || t.src_node != c.src_node || t.src_shard != c.src_shard ||
          t.src_slice != c.src_slice || t.tensor != c.tensor)
        return at + ": does not match its transfer";
      from_bytes = sent[static_cast<size_t>(c.transfer)].data();
      gs.extent = t.len;
      lo = c.src_lo - t.src_lo;
    }
    if (c.len <= 0 || lo < 0 || lo + c.len > gs.extent || c.dst_lo < 0 || c.dst_lo + c.len > gd.extent ||
        gs.rows != gd.rows || gs.inner != gd.inner)
      return at + ": slab outside its source or destination";
    copy_slab(from_bytes, gs, lo, got[key][c.dst_slice].data(), gd, c.dst_lo, c.len);
    const uint64_t n = count(writes[key][c.dst_slice], gd, c.dst_lo, c.len);
    if (c.transfer < 0) local += n;
  }
  for (size_t i = 0; i < plan.fills.size(); ++i) {
    const ptcfs::ptc::Fill& f = plan.fills[i];
    const auto key = std::make_pair(f.dst_shard, static_cast<int>(f.dst_node));
    if (!got.count(key) || f.dst_slice >= got[key].size()) return "fill " + std::to_string(i) + ": no such instance";
    const ptcfs::ptc::SlabGeometry gd =
        ptcfs::ptc::slab_geometry(tensors[f.tensor], to.slices(ts[f.dst_shard])[f.dst_slice].local_shape);
    if (f.len <= 0 || f.dst_lo < 0 || f.dst_lo + f.len > gd.extent) return "fill " + std::to_string(i) + ": outside";
    copy_slab(nullptr, gd, 0, got[key][f.dst_slice].data(), gd, f.dst_lo, f.len);
    fill += count(writes[key][f.dst_slice], gd, f.dst_lo, f.len);
  }

  for (const auto& [key, slices] : got) {
    const std::string where = ts[key.first].name() + " on node " + std::to_string(key.second);
    for (size_t j = 0; j < slices.size(); ++j) {
      for (uint8_t w : writes[key][j])
        if (w != 1) return where + " slice " + std::to_string(j) + ": a byte written " + std::to_string(w) + " times";
      if (slices[j] != want[key.first][j]) return where + " slice " + std::to_string(j) + ": differs from the oracle";
    }
  }
  if (plan.bytes_total != total || plan.bytes_local != local || plan.bytes_fill != fill)
    return "byte counts: total " + std::to_string(plan.bytes_total) + " local " + std::to_string(plan.bytes_local) +
           " fill " + std::to_string(plan.bytes_fill) + ", want " + std::to_string(total) + " " +
           std::to_string(local) + " " + std::to_string(fill);
  return "";
}

// Each old shard on a random set of nodes (sometimes none), each new shard on 1-3 distinct nodes.
inline ptcfs::ptc::ClusterHoldings random_cluster_holdings(Rng& rng, const ptcfs::ptc::Layout& from,
                                                           const ptcfs::ptc::Layout& to, int nodes) {
  ptcfs::ptc::ClusterHoldings h;
  h.num_nodes = nodes;
  for (size_t s = 0; s < from.shards().size(); ++s) {
    std::vector<int> held;
    for (int n = 0; n < nodes; ++n)
      if (rng.chance(0.4)) held.push_back(n);
    if (held.empty() && !rng.chance(0.15)) held.push_back(rng.uniform(0, nodes - 1));
    h.src_nodes.push_back(std::move(held));
  }
  for (size_t d = 0; d < to.shards().size(); ++d) {
    std::vector<int> all;
    for (int n = 0; n < nodes; ++n) all.push_back(n);
    for (int i = nodes - 1; i > 0; --i)
      std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(rng.uniform(0, i))]);
    all.resize(static_cast<size_t>(rng.uniform(1, std::min(3, nodes))));
    h.dst_nodes.push_back(std::move(all));
  }
  return h;
}

}  // namespace plan_support
