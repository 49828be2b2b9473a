// Implementation of plan_support.h; what each helper promises is documented there.
#include "plan_support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace plan_support {

using namespace ptcfs;
using namespace ptcfs::ptc;

namespace {

// Byte `offset` of full logical tensor `tensor`: a hash, so a byte that lands in the wrong
// place (another element, another byte of the element, another tensor) almost surely differs.
std::byte pattern_byte(size_t tensor, size_t offset) {
  uint64_t z = (static_cast<uint64_t>(tensor) << 40) ^ offset ^ 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<std::byte>(z & 0xff);
}

Buffers blank(const Layout& l, std::byte value) {
  Buffers out(l.shards().size());
  for (size_t s = 0; s < l.shards().size(); ++s)
    for (const Slice& sl : l.slices(l.shards()[s])) out[s].emplace_back(l.bytes(sl), value);
  return out;
}

// Slab geometry, computed from the pieces rather than from the planner's helpers.

// The global index along the slab dimension of local position x of a slice; -1 for padding.
int64_t global_at(const TensorSpec& spec, const Slice& sl, int64_t x) {
  const int k = slab_dim(spec);
  if (k < 0) return x == 0 && !sl.pieces.empty() ? 0 : -1;
  for (const Piece& pc : sl.pieces)
    if (pc.local.lo[k] <= x && x < pc.local.hi[k]) return pc.global.lo[k] + (x - pc.local.lo[k]);
  return -1;
}

// The local end (along the slab dimension) of the piece holding local position x; -1 for padding.
int64_t piece_end_at(const TensorSpec& spec, const Slice& sl, int64_t x) {
  const int k = slab_dim(spec);
  if (k < 0) return x == 0 && !sl.pieces.empty() ? 1 : -1;
  for (const Piece& pc : sl.pieces)
    if (pc.local.lo[k] <= x && x < pc.local.hi[k]) return pc.local.hi[k];
  return -1;
}

bool covers(const TensorSpec& spec, const Slice& sl, int64_t g) {
  const int k = slab_dim(spec);
  if (k < 0) return g == 0 && !sl.pieces.empty();
  for (const Piece& pc : sl.pieces)
    if (pc.global.lo[k] <= g && g < pc.global.hi[k]) return true;
  return false;
}

bool holds(const std::vector<int>& nodes, int node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

// Whether some held source shard on `node` (any node when node < 0) has tensor `ti` covering
// global index g; `pick` receives the shard indices that do, in order.
template <class Pick>
void for_each_source_covering(const Layout& from, const Holdings& h, size_t ti, int64_t g, int node, Pick&& pick) {
  const TensorSpec& spec = from.ptc().tensors[ti];
  for (size_t s = 0; s < from.shards().size(); ++s) {
    if (h.src_nodes[s].empty() || (node >= 0 && !holds(h.src_nodes[s], node))) continue;
    const int j = from.find_slice(from.shards()[s], ti);
    if (j >= 0 && covers(spec, from.slices(from.shards()[s])[static_cast<size_t>(j)], g)) pick(s);
  }
}

constexpr DType kDTypes[] = {DType::F64,     DType::F32,     DType::F16, DType::BF16, DType::I64,
                             DType::I32,     DType::I16,     DType::I8,  DType::U8,   DType::BOOL,
                             DType::F8_E4M3, DType::F8_E5M2, DType::U16, DType::U32,  DType::U64};

}  // namespace

// ---------------------------------------------------------------------------------------
// Fixtures

Ptc ptc_of(const std::string& tensors_json, int layers) {
  auto r = parse_ptc_json(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": )" + std::to_string(layers) +
                              R"(, "tensors": )" + tensors_json + "}",
                          "ptc.json");
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  return *r;
}

Layout layout_of(const Ptc& p, int tp, int pp, int dp) {
  auto r = Layout::make(p, Parallelism{tp, pp, dp});
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  return *r;
}

Plan plan_of(const Layout& from, const Layout& to, const Holdings& h) {
  auto r = make_plan(from, to, h);
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  return *r;
}

Plan plan_of(const Layout& from, const Layout& to) { return plan_of(from, to, Holdings::single_node(from, to)); }

std::vector<CopyRow> copy_rows(const Plan& p) {
  std::vector<CopyRow> out;
  for (const Copy& c : p.copies)
    out.push_back(
        {c.tensor, c.src_shard, c.src_slice, c.dst_shard, c.dst_slice, c.src_node, c.src_lo, c.dst_lo, c.len});
  return out;
}

std::vector<FillRow> fill_rows(const Plan& p) {
  std::vector<FillRow> out;
  for (const Fill& f : p.fills) out.push_back({f.tensor, f.dst_shard, f.dst_slice, f.dst_lo, f.len});
  return out;
}

bool same_plan(const Plan& a, const Plan& b) {
  return copy_rows(a) == copy_rows(b) && fill_rows(a) == fill_rows(b) && a.bytes_total == b.bytes_total &&
         a.bytes_local == b.bytes_local && a.bytes_remote == b.bytes_remote && a.bytes_fill == b.bytes_fill;
}

// ---------------------------------------------------------------------------------------
// The oracle and the reference executor.

std::vector<Bytes> full_tensors(const Ptc& p) {
  std::vector<Bytes> out;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorSpec& t = p.tensors[i];
    Bytes b(static_cast<size_t>(num_elements(t.shape)) * dtype_size(t.dtype));
    for (size_t o = 0; o < b.size(); ++o) b[o] = pattern_byte(i, o);
    out.push_back(std::move(b));
  }
  return out;
}

Buffers oracle(const Layout& l, const std::vector<Bytes>& full) {
  Buffers out = blank(l, std::byte{0});
  for (size_t s = 0; s < l.shards().size(); ++s) {
    const auto& slices = l.slices(l.shards()[s]);
    for (size_t j = 0; j < slices.size(); ++j) {
      const Slice& sl = slices[j];
      const TensorSpec& spec = l.tensor(sl);
      for (const Piece& pc : sl.pieces) {
        // The slice's buffer placed in the global frame so that this piece lines up.
        std::vector<int64_t> shift(pc.local.rank());
        for (size_t d = 0; d < shift.size(); ++d) shift[d] = pc.global.lo[d] - pc.local.lo[d];
        copy_region(pc.global, full[sl.tensor].data(), Box::of_shape(spec.shape), out[s][j].data(),
                    Box::of_shape(sl.local_shape).translated(shift), dtype_size(spec.dtype));
      }
    }
  }
  return out;
}

Buffers apply(const Layout& from, const Layout& to, const Plan& plan, const Buffers& src) {
  Buffers dst = blank(to, std::byte{0xCD});
  for (const Copy& c : plan.copies) {
    const Bytes& s = src[c.src_shard][c.src_slice];
    Bytes& d = dst[c.dst_shard][c.dst_slice];
    for_each_copy_run(from, to, c, [&](const Run& r) {
      std::memcpy(d.data() + r.dst, s.data() + r.src, static_cast<size_t>(r.len));
    });
  }
  for (const Fill& f : plan.fills) {
    Bytes& d = dst[f.dst_shard][f.dst_slice];
    for_each_fill_run(to, f, [&](const Run& r) { std::memset(d.data() + r.dst, 0, static_cast<size_t>(r.len)); });
  }
  return dst;
}

std::string first_difference(const Layout& l, const Buffers& got, const Buffers& want) {
  if (got.size() != want.size()) return "different shard counts";
  for (size_t s = 0; s < got.size(); ++s) {
    if (got[s].size() != want[s].size()) return "shard " + l.shards()[s].name() + ": different slice counts";
    for (size_t j = 0; j < got[s].size(); ++j) {
      const std::string where =
          "shard " + l.shards()[s].name() + " tensor '" + l.tensor(l.slices(l.shards()[s])[j]).name + "'";
      if (got[s][j].size() != want[s][j].size()) return where + ": different sizes";
      for (size_t b = 0; b < got[s][j].size(); ++b)
        if (got[s][j][b] != want[s][j][b])
          return where + " byte " + std::to_string(b) + ": got " + std::to_string(static_cast<int>(got[s][j][b])) +
                 ", want " + std::to_string(static_cast<int>(want[s][j][b]));
    }
  }
  return "";
}

// ---------------------------------------------------------------------------------------
// The write counter.

std::string plan_problem(const Layout& from, const Layout& to, const Holdings& h, const Plan& plan, bool single_node) {
  const auto& fs = from.shards();
  const auto& ts = to.shards();
  std::vector<std::vector<std::vector<uint8_t>>> writes(ts.size());
  uint64_t total = 0;
  for (size_t d = 0; d < ts.size(); ++d)
    for (const Slice& sl : to.slices(ts[d])) {
      writes[d].emplace_back(to.bytes(sl), 0);
      total += to.bytes(sl);
    }
  uint64_t local = 0, remote = 0, fill = 0;
  std::array<int64_t, 3> prev{-1, -1, -1};
  for (size_t i = 0; i < plan.copies.size(); ++i) {
    const Copy& c = plan.copies[i];
    const std::string at = "copy " + std::to_string(i) + " (src shard " + std::to_string(c.src_shard) + " lo " +
                           std::to_string(c.src_lo) + ", dst shard " + std::to_string(c.dst_shard) + " lo " +
                           std::to_string(c.dst_lo) + ", len " + std::to_string(c.len) + ")";
    if (c.src_shard >= fs.size() || c.dst_shard >= ts.size()) return at + ": shard index out of range";
    const auto& sslices = from.slices(fs[c.src_shard]);
    const auto& dslices = to.slices(ts[c.dst_shard]);
    if (c.src_slice >= sslices.size() || c.dst_slice >= dslices.size()) return at + ": slice index out of range";
    const Slice& ss = sslices[c.src_slice];
    const Slice& ds = dslices[c.dst_slice];
    if (ss.tensor != c.tensor || ds.tensor != c.tensor) return at + ": tensor differs from its slices'";
    const TensorSpec& spec = to.tensor(ds);
    if (c.len <= 0) return at + ": empty copy";
    const std::array<int64_t, 3> key{c.dst_shard, c.dst_slice, c.dst_lo};
    if (!(prev < key)) return at + ": out of order";
    prev = key;
    for (int64_t x = 0; x < c.len; ++x) {
      const int64_t g = global_at(spec, ss, c.src_lo + x);
      if (g < 0 || g != global_at(spec, ds, c.dst_lo + x))
        return at + ": position " + std::to_string(x) + " is not the same element on both sides";
    }
    if (c.src_lo + c.len != piece_end_at(spec, ss, c.src_lo) && c.dst_lo + c.len != piece_end_at(spec, ds, c.dst_lo))
      return at + ": not maximal (ends inside both its source and its destination piece)";

    if (!holds(h.src_nodes[c.src_shard], c.src_node)) return at + ": src_node does not hold the source shard";
    const int dnode = h.dst_node[c.dst_shard];
    if (holds(h.src_nodes[c.src_shard], dnode) && c.src_node != dnode)
      return at + ": remote although its own source is on the destination's node";
    if (c.src_node != dnode)
      for (int64_t x = 0; x < c.len; ++x) {
        bool local_source = false;
        for_each_source_covering(from, h, c.tensor, global_at(spec, ds, c.dst_lo + x), dnode,
                                 [&](size_t) { local_source = true; });
        if (local_source)
          return at + ": position " + std::to_string(x) + " is copied remotely though the destination's node holds it";
      }
    if (single_node) {
      std::optional<size_t> want;
      bool want_same_id = false;
      for_each_source_covering(from, h, c.tensor, global_at(spec, ds, c.dst_lo), -1, [&](size_t s) {
        if (want_same_id) return;
        if (fs[s] == ts[c.dst_shard]) {
          want = s;
          want_same_id = true;
        } else if (!want) {
          want = s;
        }
      });
      if (!want || *want != c.src_shard)
        return at + ": expected source shard " + (want ? std::to_string(*want) : std::string("none"));
    }

    uint64_t copied = 0;
    bool outside = false;
    const auto sbytes = static_cast<int64_t>(from.bytes(ss)), dbytes = static_cast<int64_t>(to.bytes(ds));
    auto& w = writes[c.dst_shard][c.dst_slice];
    for_each_copy_run(from, to, c, [&](const Run& r) {
      if (r.len <= 0 || r.src < 0 || r.src + r.len > sbytes || r.dst < 0 || r.dst + r.len > dbytes) {
        outside = true;
        return;
      }
      for (int64_t b = 0; b < r.len; ++b) ++w[static_cast<size_t>(r.dst + b)];
      copied += static_cast<uint64_t>(r.len);
    });
    if (outside) return at + ": a run lies outside its source or destination slice";
    if (copied != static_cast<uint64_t>(c.len) * slab_unit_bytes(spec, ds.local_shape))
      return at + ": its runs move " + std::to_string(copied) + " bytes, not len * unit";
    (c.src_node == dnode ? local : remote) += copied;
  }

  prev = {-1, -1, -1};
  for (size_t i = 0; i < plan.fills.size(); ++i) {
    const Fill& f = plan.fills[i];
    const std::string at = "fill " + std::to_string(i) + " (dst shard " + std::to_string(f.dst_shard) + " lo " +
                           std::to_string(f.dst_lo) + ", len " + std::to_string(f.len) + ")";
    if (f.dst_shard >= ts.size() || f.dst_slice >= to.slices(ts[f.dst_shard]).size()) return at + ": out of range";
    const Slice& ds = to.slices(ts[f.dst_shard])[f.dst_slice];
    if (ds.tensor != f.tensor) return at + ": tensor differs from its slice's";
    if (f.len <= 0) return at + ": empty fill";
    const std::array<int64_t, 3> key{f.dst_shard, f.dst_slice, f.dst_lo};
    if (!(prev < key)) return at + ": out of order";
    prev = key;
    for (int64_t x = 0; x < f.len; ++x)
      if (global_at(to.tensor(ds), ds, f.dst_lo + x) >= 0) return at + ": fills a position a piece covers";
    bool outside = false;
    const auto dbytes = static_cast<int64_t>(to.bytes(ds));
    auto& w = writes[f.dst_shard][f.dst_slice];
    for_each_fill_run(to, f, [&](const Run& r) {
      if (r.len <= 0 || r.dst < 0 || r.dst + r.len > dbytes) {
        outside = true;
        return;
      }
      for (int64_t b = 0; b < r.len; ++b) ++w[static_cast<size_t>(r.dst + b)];
      fill += static_cast<uint64_t>(r.len);
    });
    if (outside) return at + ": a run lies outside its slice";
  }

  for (size_t d = 0; d < ts.size(); ++d)
    for (size_t j = 0; j < writes[d].size(); ++j)
      for (size_t b = 0; b < writes[d][j].size(); ++b)
        if (writes[d][j][b] != 1)
          return "shard " + ts[d].name() + " slice " + std::to_string(j) + " byte " + std::to_string(b) + " written " +
                 std::to_string(writes[d][j][b]) + " times";
  auto count_problem = [](const char* what, uint64_t got, uint64_t want) {
    if (got == want) return std::string();
    return std::string(what) + " " + std::to_string(got) + ", want " + std::to_string(want);
  };
  for (const std::string& problem :
       {count_problem("bytes_total", plan.bytes_total, total), count_problem("bytes_local", plan.bytes_local, local),
        count_problem("bytes_remote", plan.bytes_remote, remote), count_problem("bytes_fill", plan.bytes_fill, fill)})
    if (!problem.empty()) return problem;
  if (local + remote + fill != total) return "local + remote + fill != total";
  return "";
}

std::string plan_problem(const Layout& from, const Layout& to, const Plan& plan) {
  return plan_problem(from, to, Holdings::single_node(from, to), plan, true);
}

// ---------------------------------------------------------------------------------------
// Random PTCs and configs.

Ptc random_ptc(Rng& rng) {
  Ptc p;
  p.num_layers = rng.uniform(1, 8);
  const int n = rng.uniform(1, 4);
  for (int i = 0; i < n; ++i) {
    TensorSpec t;
    t.name = std::string(1, static_cast<char>('a' + i)) + "/w";
    t.dtype = kDTypes[rng.uniform(0, static_cast<int>(std::size(kDTypes)) - 1)];
    const int rank = rng.uniform(0, 3);
    for (int d = 0; d < rank; ++d) t.shape.push_back(rng.chance(0.03) ? 0 : rng.uniform(1, 3));
    if (rank > 0 && rng.chance(0.7)) {
      const int k = rng.uniform(0, rank - 1);
      t.tp_dim = k;
      switch (rng.uniform(0, 2)) {
        case 0:
          t.shape[k] = rng.pick<int64_t>({0, 1, 2, 3, 4, 6, 8, 12, 16, 24});
          break;
        case 1:
          t.parts = rng.uniform(2, 3);
          t.shape[k] = t.parts * rng.pick<int64_t>({1, 2, 3, 4, 8});
          break;
        default:
          t.pad_to = rng.uniform(1, 4);
          t.shape[k] = rng.uniform(1, 13);
          break;
      }
    }
    using K = Placement::Kind;
    switch (rng.uniform(0, 4)) {
      case 0:
        t.placement.kind = K::kFirst;
        break;
      case 1:
        t.placement.kind = K::kLast;
        break;
      case 2:
        t.placement.kind = K::kAll;
        break;
      case 3:
        t.placement.kind = K::kList;
        for (int s = 0; s < 4; ++s)
          if (rng.chance(0.4)) t.placement.stages.push_back(s);
        if (t.placement.stages.empty()) t.placement.stages.push_back(rng.uniform(0, 1));
        break;
      default:
        t.placement.kind = K::kLayer;
        t.placement.layer = rng.uniform(0, p.num_layers - 1);
        break;
    }
    p.tensors.push_back(std::move(t));
  }
  // The generator makes only PTCs the parser would accept.
  auto reparsed = parse_ptc_json(ptc_to_json(p), "random ptc.json");
  INFO(ptc_to_json(p) << reparsed.status().to_string());
  REQUIRE(reparsed.is_ok());
  return *reparsed;
}

std::optional<Layout> random_layout(Rng& rng, const Ptc& p) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    const Parallelism par{rng.pick({1, 2, 4, 8}), rng.uniform(1, std::min(p.num_layers, 4)), rng.uniform(1, 3)};
    auto l = Layout::make(p, par);
    if (l) return std::move(l).value();
  }
  return std::nullopt;
}

std::string describe(const Ptc& p, std::initializer_list<const Layout*> ls) {
  std::string out = ptc_to_json(p) + "configs:";
  for (const Layout* l : ls) out += " " + l->parallelism().to_string();
  return out;
}

Holdings random_holdings(Rng& rng, const Layout& from, const Layout& to, int nodes, double p_unheld) {
  Holdings h;
  h.num_nodes = nodes;
  for (size_t s = 0; s < from.shards().size(); ++s) {
    std::vector<int> held;
    if (!rng.chance(p_unheld)) {
      for (int n = 0; n < nodes; ++n)
        if (rng.chance(0.4)) held.push_back(n);
      if (held.empty()) held.push_back(rng.uniform(0, nodes - 1));
    }
    h.src_nodes.push_back(std::move(held));
  }
  for (size_t d = 0; d < to.shards().size(); ++d) h.dst_node.push_back(rng.uniform(0, nodes - 1));
  return h;
}

bool some_element_unheld(const Layout& from, const Layout& to, const Holdings& h) {
  for (const ShardId& d : to.shards())
    for (const Slice& sl : to.slices(d)) {
      const TensorSpec& spec = to.tensor(sl);
      const int k = slab_dim(spec);
      for (const Piece& pc : sl.pieces)
        for (int64_t g = k < 0 ? 0 : pc.global.lo[k]; g < (k < 0 ? 1 : pc.global.hi[k]); ++g) {
          bool held = false;
          for_each_source_covering(from, h, sl.tensor, g, -1, [&](size_t) { held = true; });
          if (!held) return true;
        }
    }
  return false;
}

}  // namespace plan_support
