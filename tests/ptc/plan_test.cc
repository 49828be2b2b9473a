#include "ptc/plan.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace ptc;

namespace {

// ---------------------------------------------------------------------------------------
// Fixtures

Ptc ptc_of(const std::string& tensors_json, int layers = 0) {
  auto r = parse_ptc_json(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": )" + std::to_string(layers) +
                              R"(, "tensors": )" + tensors_json + "}",
                          "ptc.json");
  INFO(r.status().to_string());
  REQUIRE(r.is_ok());
  return *r;
}

Layout layout_of(const Ptc& p, int tp, int pp = 1, int dp = 1) {
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

// A copy as {tensor, src_shard, src_slice, dst_shard, dst_slice, src_node, src_lo, dst_lo, len}.
using CopyRow = std::array<int64_t, 9>;
// A fill as {tensor, dst_shard, dst_slice, dst_lo, len}.
using FillRow = std::array<int64_t, 5>;
// A run as {src, dst, len}.
using RunRow = std::array<int64_t, 3>;

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

std::vector<RunRow> copy_runs(const Layout& from, const Layout& to, const Copy& c) {
  std::vector<RunRow> out;
  for_each_copy_run(from, to, c, [&](const Run& r) { out.push_back({r.src, r.dst, r.len}); });
  return out;
}

// Every field of two plans, compared.
bool same_plan(const Plan& a, const Plan& b) {
  return copy_rows(a) == copy_rows(b) && fill_rows(a) == fill_rows(b) && a.bytes_total == b.bytes_total &&
         a.bytes_local == b.bytes_local && a.bytes_remote == b.bytes_remote && a.bytes_fill == b.bytes_fill;
}

// Remote bytes served by each node.
std::vector<uint64_t> remote_bytes_by_node(const Layout& from, const Layout& to, const Holdings& h, const Plan& p) {
  std::vector<uint64_t> out(static_cast<size_t>(h.num_nodes), 0);
  for (const Copy& c : p.copies) {
    if (c.src_node == h.dst_node[c.dst_shard]) continue;
    for_each_copy_run(from, to, c,
                      [&](const Run& r) { out[static_cast<size_t>(c.src_node)] += static_cast<uint64_t>(r.len); });
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// The oracle and the reference executor. A layout's bytes are kept per shard
// (layout.shards() order), per slice (layout.slices(shard) order).

using Bytes = std::vector<std::byte>;
using Buffers = std::vector<std::vector<Bytes>>;

// Byte `offset` of full logical tensor `tensor`: a hash, so a byte that lands in the wrong
// place (another element, another byte of the element, another tensor) almost surely differs.
std::byte pattern_byte(size_t tensor, size_t offset) {
  uint64_t z = (static_cast<uint64_t>(tensor) << 40) ^ offset ^ 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<std::byte>(z & 0xff);
}

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

Buffers blank(const Layout& l, std::byte value) {
  Buffers out(l.shards().size());
  for (size_t s = 0; s < l.shards().size(); ++s)
    for (const Slice& sl : l.slices(l.shards()[s])) out[s].emplace_back(l.bytes(sl), value);
  return out;
}

// What every slice of `l` must hold: its pieces cut from the full tensors, padding zero.
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

// Carries out a plan with memcpy and memset. Destination bytes start as 0xCD so that a byte
// the plan forgets shows. Call only on plans plan_problem() accepts (runs are not bounds-checked).
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

// "" when equal, else where the first difference is.
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

// ---------------------------------------------------------------------------------------
// The write counter: everything a plan promises that can be checked without its bytes.
// Returns "" when the plan keeps its promises, else the first broken one.
//
// - indices are in range, and a copy's tensor is the tensor of both its slices;
// - every position of a copy maps to the same global element on both sides, and a copy is
//   maximal (it ends where its source piece or its destination piece ends);
// - every run lies inside its source and destination slices; every destination byte is
//   written exactly once by copies and fills together;
// - copies and fills are ordered by destination shard, slice, position;
// - byte counts add up; a copy's src_node holds its shard; no remote copy moves an element
//   that a source on the destination's node holds;
// - with `single_node`, the source chosen at the start of each copy is the destination's own
//   shard id when it covers that element, else the lowest covering shard index.
std::string plan_problem(const Layout& from, const Layout& to, const Holdings& h, const Plan& plan,
                         bool single_node) {
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

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(g_); }
  template <class T>
  T pick(std::initializer_list<T> xs) {
    return *(xs.begin() + uniform(0, static_cast<int>(xs.size()) - 1));
  }

 private:
  std::mt19937_64 g_;
};

constexpr DType kDTypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64,     DType::I32,
                             DType::I16, DType::I8,  DType::U8,  DType::BOOL, DType::F8_E4M3, DType::F8_E5M2};

// 1-4 tensors of rank 0-3 with small dimensions (occasionally 0): replicated, split, split
// into fused parts, or split with padding; placed on the first, last or every stage, a stage
// list, or by layer.
Ptc random_ptc(Rng& rng) {
  Ptc p;
  p.num_layers = rng.uniform(1, 8);
  const int n = rng.uniform(1, 4);
  for (int i = 0; i < n; ++i) {
    TensorSpec t;
    t.name = std::string(1, static_cast<char>('a' + i)) + "/w";
    t.dtype = kDTypes[rng.uniform(0, 11)];
    const int rank = rng.uniform(0, 3);
    for (int d = 0; d < rank; ++d) t.shape.push_back(rng.chance(0.03) ? 0 : rng.uniform(1, 3));
    if (rank > 0 && rng.chance(0.7)) {
      const int k = rng.uniform(0, rank - 1);
      t.tp_dim = k;
      switch (rng.uniform(0, 2)) {
        case 0: t.shape[k] = rng.pick<int64_t>({0, 1, 2, 3, 4, 6, 8, 12, 16, 24}); break;
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
      case 0: t.placement.kind = K::kFirst; break;
      case 1: t.placement.kind = K::kLast; break;
      case 2: t.placement.kind = K::kAll; break;
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

// A random config Layout::make accepts (tp in {1, 2, 4, 8}, pp <= num_layers, dp 1-3), or none.
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

// Each source shard on a random set of nodes (empty with probability p_unheld), each
// destination shard on a random node.
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

// Whether some destination element is held by no held source.
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

}  // namespace

// ---------------------------------------------------------------------------------------
// Hand-written plans.

TEST_CASE("tp2 -> tp4 on a row-split [8, 4] tensor copies each half of a source slice to one rank", "[plan]") {
  const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 4);
  const Plan plan = plan_of(from, to);
  // {tensor, src_shard, src_slice, dst_shard, dst_slice, src_node, src_lo, dst_lo, len}
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 2},
                               {0, 0, 0, 1, 0, 0, 2, 0, 2},
                               {0, 1, 0, 2, 0, 0, 0, 0, 2},
                               {0, 1, 0, 3, 0, 0, 2, 0, 2},
                           });
  CHECK(plan.fills.empty());
  CHECK(plan.bytes_total == 128);
  CHECK(plan.bytes_local == 128);
  CHECK(plan.bytes_remote == 0);
  CHECK(plan.bytes_fill == 0);
  // Whole rows are contiguous: one run of two 16-byte rows.
  CHECK(copy_runs(from, to, plan.copies[1]) == std::vector<RunRow>{{32, 0, 32}});
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("tp2 -> tp4 on a column-split [4, 8] tensor copies one run per row", "[plan]") {
  const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [4, 8], "tp_dim": 1}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 4);
  const Plan plan = plan_of(from, to);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 2},
                               {0, 0, 0, 1, 0, 0, 2, 0, 2},
                               {0, 1, 0, 2, 0, 0, 0, 0, 2},
                               {0, 1, 0, 3, 0, 0, 2, 0, 2},
                           });
  // Columns 2-3 of a 4-column source row (16 bytes) to a 2-column destination row (8 bytes).
  CHECK(copy_runs(from, to, plan.copies[1]) == std::vector<RunRow>{{8, 0, 8}, {24, 8, 8}, {40, 16, 8}, {56, 24, 8}});
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("tp2 -> tp4 splits rows of each fused part separately", "[plan]") {
  // 8 rows in 2 parts of 4. tp=2 rank t holds rows [2t, 2t+2) and [4+2t, 6+2t); tp=4 rank t
  // holds row t and row 4+t: each destination piece comes from a different local chunk.
  const Ptc p = ptc_of(R"({"qk": {"dtype": "F32", "shape": [8, 2], "tp_dim": 0, "parts": 2}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 4);
  const Plan plan = plan_of(from, to);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 1},
                               {0, 0, 0, 0, 0, 0, 2, 1, 1},
                               {0, 0, 0, 1, 0, 0, 1, 0, 1},
                               {0, 0, 0, 1, 0, 0, 3, 1, 1},
                               {0, 1, 0, 2, 0, 0, 0, 0, 1},
                               {0, 1, 0, 2, 0, 0, 2, 1, 1},
                               {0, 1, 0, 3, 0, 0, 1, 0, 1},
                               {0, 1, 0, 3, 0, 0, 3, 1, 1},
                           });
  CHECK(plan.fills.empty());
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("tp4 -> tp2 gathers each fused part of a rank from two sources", "[plan]") {
  const Ptc p = ptc_of(R"({"qk": {"dtype": "F32", "shape": [8, 2], "tp_dim": 0, "parts": 2}})");
  const Layout from = layout_of(p, 4), to = layout_of(p, 2);
  const Plan plan = plan_of(from, to);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 1},
                               {0, 1, 0, 0, 0, 0, 0, 1, 1},
                               {0, 0, 0, 0, 0, 0, 1, 2, 1},
                               {0, 1, 0, 0, 0, 0, 1, 3, 1},
                               {0, 2, 0, 1, 0, 0, 0, 0, 1},
                               {0, 3, 0, 1, 0, 0, 0, 1, 1},
                               {0, 2, 0, 1, 0, 0, 1, 2, 1},
                               {0, 3, 0, 1, 0, 0, 1, 3, 1},
                           });
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("pad_to: vocab 10, pad_to 4, tp1 -> tp2 fills the rows past the vocabulary with zeros", "[plan]") {
  // tp=1: 12 local rows, rows 10-11 padding. tp=2: 8 rows per rank; rank 1 holds rows 8-9
  // and 6 rows of padding. A row is 2 F32 = 8 bytes.
  const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [10, 2], "tp_dim": 0, "pad_to": 4}})");
  const Layout tp1 = layout_of(p, 1), tp2 = layout_of(p, 2), tp4 = layout_of(p, 4);

  const Plan up = plan_of(tp1, tp2);
  CHECK(copy_rows(up) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 8}, {0, 0, 0, 1, 0, 0, 8, 0, 2}});
  // {tensor, dst_shard, dst_slice, dst_lo, len}
  CHECK(fill_rows(up) == std::vector<FillRow>{{0, 1, 0, 2, 6}});
  CHECK(up.bytes_total == 128);
  CHECK(up.bytes_fill == 48);
  CHECK(up.bytes_local == 80);
  CHECK(plan_problem(tp1, tp2, up) == "");

  const Plan down = plan_of(tp2, tp1);
  CHECK(copy_rows(down) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 8}, {0, 1, 0, 0, 0, 0, 0, 8, 2}});
  CHECK(fill_rows(down) == std::vector<FillRow>{{0, 0, 0, 10, 2}});
  CHECK(down.bytes_total == 96);
  CHECK(down.bytes_fill == 16);
  CHECK(plan_problem(tp2, tp1, down) == "");

  // tp=4: 4 rows per rank of 16; rank 2 holds rows 8-9, rank 3 only padding.
  const Plan four = plan_of(tp1, tp4);
  CHECK(copy_rows(four) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 4},
                               {0, 0, 0, 1, 0, 0, 4, 0, 4},
                               {0, 0, 0, 2, 0, 0, 8, 0, 2},
                           });
  CHECK(fill_rows(four) == std::vector<FillRow>{{0, 2, 0, 2, 2}, {0, 3, 0, 0, 4}});
  CHECK(plan_problem(tp1, tp4, four) == "");

  // The fills are zeros in the executed result; the copies carry the rows.
  const auto full = full_tensors(p);
  CHECK(first_difference(tp2, apply(tp1, tp2, up, oracle(tp1, full)), oracle(tp2, full)) == "");
  CHECK(first_difference(tp4, apply(tp1, tp4, four, oracle(tp1, full)), oracle(tp4, full)) == "");
}

TEST_CASE("pp1 -> pp2 moves each layer's tensor to its stage", "[plan]") {
  const Ptc p = ptc_of(R"({"layers/0/w": {"dtype": "F32", "shape": [2, 2], "layer": 0},
                           "layers/1/w": {"dtype": "F32", "shape": [2, 2], "layer": 1}})",
                       2);
  const Layout from = layout_of(p, 1, 1), to = layout_of(p, 1, 2);
  const Plan plan = plan_of(from, to);
  // Source tp0-pp0 holds both (slices 0 and 1); tp0-pp1 receives layer 1 as its slice 0.
  CHECK(copy_rows(plan) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 2}, {1, 0, 1, 1, 0, 0, 0, 0, 2}});
  CHECK(plan_problem(from, to, plan) == "");
}

TEST_CASE("a tensor on every stage is copied from the same shard id, else from the lowest shard", "[plan]") {
  const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [4], "stage": "all"}})", 2);
  const Layout from = layout_of(p, 1, 2), to = layout_of(p, 2, 2);
  const Plan plan = plan_of(from, to);
  // from: tp0-pp0, tp0-pp1. to: tp0-pp0, tp1-pp0, tp0-pp1, tp1-pp1.
  CHECK(copy_rows(plan) == std::vector<CopyRow>{
                               {0, 0, 0, 0, 0, 0, 0, 0, 4},
                               {0, 0, 0, 1, 0, 0, 0, 0, 4},
                               {0, 1, 0, 2, 0, 0, 0, 0, 4},
                               {0, 0, 0, 3, 0, 0, 0, 0, 4},
                           });
  CHECK(plan_problem(from, to, plan) == "");
}

// ---------------------------------------------------------------------------------------
// Properties over random PTCs and configs.

TEST_CASE("random plans move exactly the oracle's bytes, once each, and round-trip", "[plan]") {
  Rng rng(20240601);
  int cases = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const Ptc p = random_ptc(rng);
    auto a = random_layout(rng, p), b = random_layout(rng, p), c = random_layout(rng, p);
    if (!a || !b || !c) continue;
    ++cases;
    INFO(describe(p, {&*a, &*b, &*c}));
    const auto full = full_tensors(p);
    const Buffers oa = oracle(*a, full), ob = oracle(*b, full);

    const Plan ab = plan_of(*a, *b);
    REQUIRE(plan_problem(*a, *b, ab) == "");
    const Buffers got_b = apply(*a, *b, ab, oa);
    REQUIRE(first_difference(*b, got_b, ob) == "");

    // Determinism: the same inputs give the same plan, field for field.
    CHECK(same_plan(ab, plan_of(*a, *b)));

    // A -> B -> A restores A byte for byte.
    const Plan ba = plan_of(*b, *a);
    REQUIRE(plan_problem(*b, *a, ba) == "");
    REQUIRE(first_difference(*a, apply(*b, *a, ba, got_b), oa) == "");

    // A -> C -> B equals A -> B.
    const Plan ac = plan_of(*a, *c), cb = plan_of(*c, *b);
    REQUIRE(plan_problem(*a, *c, ac) == "");
    REQUIRE(plan_problem(*c, *b, cb) == "");
    REQUIRE(first_difference(*b, apply(*c, *b, cb, apply(*a, *c, ac, oa)), got_b) == "");
  }
  CHECK(cases >= 300);
}

TEST_CASE("planning a layout onto itself copies every piece from its own shard, whole", "[plan]") {
  Rng rng(77);
  int cases = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const Ptc p = random_ptc(rng);
    const auto a = random_layout(rng, p);
    if (!a) continue;
    ++cases;
    INFO(describe(p, {&*a}));
    const Plan plan = plan_of(*a, *a);
    REQUIRE(plan_problem(*a, *a, plan) == "");
    // The copies, one per piece in shard, slice, piece order, each the whole piece (a piece
    // empty along the slab dimension, of a tensor with a zero dimension, needs none).
    std::vector<CopyRow> want;
    for (size_t s = 0; s < a->shards().size(); ++s) {
      const auto& slices = a->slices(a->shards()[s]);
      for (size_t j = 0; j < slices.size(); ++j) {
        const TensorSpec& spec = a->tensor(slices[j]);
        const int k = slab_dim(spec);
        auto pieces = slices[j].pieces;
        if (k >= 0)
          std::sort(pieces.begin(), pieces.end(),
                    [k](const Piece& x, const Piece& y) { return x.local.lo[k] < y.local.lo[k]; });
        for (const Piece& pc : pieces) {
          const int64_t lo = k < 0 ? 0 : pc.local.lo[k], len = k < 0 ? 1 : pc.local.hi[k] - pc.local.lo[k];
          const auto si = static_cast<int64_t>(s), ji = static_cast<int64_t>(j);
          if (len > 0) want.push_back({static_cast<int64_t>(slices[j].tensor), si, ji, si, ji, 0, lo, lo, len});
        }
      }
    }
    CHECK(copy_rows(plan) == want);
    CHECK(plan.bytes_remote == 0);
    CHECK(plan.bytes_local + plan.bytes_fill == plan.bytes_total);
  }
  CHECK(cases >= 250);
}

TEST_CASE("random multi-node plans read from the destination's node whenever it holds the bytes", "[plan]") {
  Rng rng(4242);
  int planned = 0, refused = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const Ptc p = random_ptc(rng);
    const auto a = random_layout(rng, p), b = random_layout(rng, p);
    if (!a || !b) continue;
    const Holdings h = random_holdings(rng, *a, *b, rng.uniform(2, 3), 0.15);
    INFO(describe(p, {&*a, &*b}));
    const auto r = make_plan(*a, *b, h);
    if (some_element_unheld(*a, *b, h)) {
      // A needed shard that no node holds.
      CHECK_FALSE(r.is_ok());
      ++refused;
      continue;
    }
    INFO(r.status().to_string());
    REQUIRE(r.is_ok());
    ++planned;
    REQUIRE(plan_problem(*a, *b, h, *r, false) == "");
    const auto full = full_tensors(p);
    REQUIRE(first_difference(*b, apply(*a, *b, *r, oracle(*a, full)), oracle(*b, full)) == "");
    CHECK(same_plan(*r, plan_of(*a, *b, h)));
  }
  CHECK(planned >= 250);
  CHECK(refused >= 10);
}

// ---------------------------------------------------------------------------------------
// Several nodes, by hand.

TEST_CASE("a source on the destination's node wins over the same shard id on another node", "[plan]") {
  const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [4, 4]}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 2);
  Holdings h;
  h.num_nodes = 2;
  h.src_nodes = {{1}, {0}};  // tp0 on node 1, tp1 on node 0
  h.dst_node = {0, 1};
  const Plan plan = plan_of(from, to, h);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{{0, 1, 0, 0, 0, 0, 0, 0, 4}, {0, 0, 0, 1, 0, 1, 0, 0, 4}});
  CHECK(plan.bytes_local == 128);
  CHECK(plan.bytes_remote == 0);
  CHECK(plan_problem(from, to, h, plan, false) == "");
}

TEST_CASE("replicas on two nodes share the remote bytes of a replicated tensor", "[plan]") {
  // One source shard of a 64-byte tensor, held on nodes 0 and 1; four destinations.
  const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [4, 4]}})");
  const Layout from = layout_of(p, 1), to = layout_of(p, 4);
  Holdings h;
  h.num_nodes = 3;
  h.src_nodes = {{0, 1}};

  SECTION("all destinations on a third node alternate between the replicas") {
    h.dst_node = {2, 2, 2, 2};
    const Plan plan = plan_of(from, to, h);
    CHECK(copy_rows(plan) == std::vector<CopyRow>{
                                 {0, 0, 0, 0, 0, 0, 0, 0, 4},
                                 {0, 0, 0, 1, 0, 1, 0, 0, 4},
                                 {0, 0, 0, 2, 0, 0, 0, 0, 4},
                                 {0, 0, 0, 3, 0, 1, 0, 0, 4},
                             });
    CHECK(plan.bytes_remote == 256);
    CHECK(plan.bytes_local == 0);
    CHECK(remote_bytes_by_node(from, to, h, plan) == std::vector<uint64_t>{128, 128, 0});
    CHECK(plan_problem(from, to, h, plan, false) == "");
  }
  SECTION("destinations on the holders' nodes copy locally; the others go to the less loaded holder") {
    // tp0 on node 0 (local, node 0 load 64); tp1 on node 2 takes node 1 (load 0);
    // tp2 on node 2 takes node 0 (tie at 64, first holder); tp3 on node 1 is local.
    h.dst_node = {0, 2, 2, 1};
    const Plan plan = plan_of(from, to, h);
    CHECK(copy_rows(plan) == std::vector<CopyRow>{
                                 {0, 0, 0, 0, 0, 0, 0, 0, 4},
                                 {0, 0, 0, 1, 0, 1, 0, 0, 4},
                                 {0, 0, 0, 2, 0, 0, 0, 0, 4},
                                 {0, 0, 0, 3, 0, 1, 0, 0, 4},
                             });
    CHECK(plan.bytes_local == 128);
    CHECK(plan.bytes_remote == 128);
    CHECK(remote_bytes_by_node(from, to, h, plan) == std::vector<uint64_t>{64, 64, 0});
    CHECK(plan_problem(from, to, h, plan, false) == "");
  }
}

TEST_CASE("a split tensor whose shards are on two nodes is gathered from both", "[plan]") {
  // tp=2 -> tp=1 on a third node: rows 0-3 from node 0, rows 4-7 from the then less loaded node 1.
  const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 1);
  Holdings h;
  h.num_nodes = 3;
  h.src_nodes = {{0, 1}, {0, 1}};
  h.dst_node = {2};
  const Plan plan = plan_of(from, to, h);
  CHECK(copy_rows(plan) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 4}, {0, 1, 0, 0, 0, 1, 0, 4, 4}});
  CHECK(remote_bytes_by_node(from, to, h, plan) == std::vector<uint64_t>{64, 64, 0});
  CHECK(plan.bytes_remote == 128);
  CHECK(plan_problem(from, to, h, plan, false) == "");
}

// ---------------------------------------------------------------------------------------
// Errors.

TEST_CASE("make_plan refuses layouts of different PTCs", "[plan]") {
  const Ptc base = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
  const Layout from = layout_of(base, 2);
  const char* others[] = {
      R"({"w": {"dtype": "F32", "shape": [8, 8], "tp_dim": 0}})",             // shape
      R"({"w": {"dtype": "F16", "shape": [8, 4], "tp_dim": 0}})",             // dtype
      R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 1}})",             // tp_dim
      R"({"w": {"dtype": "F32", "shape": [8, 4]}})",                          // replicated
      R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "parts": 2}})", // parts
      R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "pad_to": 2}})",// pad_to
      R"({"v": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})",             // name
      R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}, "x": {"dtype": "F32", "shape": [1]}})",  // count
  };
  for (const char* other : others) {
    INFO(other);
    const Layout to = layout_of(ptc_of(other), 2);
    const auto r = make_plan(from, to, Holdings::single_node(from, to));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    const auto back = make_plan(to, from, Holdings::single_node(to, from));
    REQUIRE_FALSE(back.is_ok());
    CHECK(back.status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("make_plan refuses holdings that do not match the layouts", "[plan]") {
  const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
  const Layout from = layout_of(p, 2), to = layout_of(p, 4);
  const Holdings good = Holdings::single_node(from, to);
  REQUIRE(make_plan(from, to, good).is_ok());

  SECTION("one source shard too few") {
    Holdings h = good;
    h.src_nodes.pop_back();
    const auto r = make_plan(from, to, h);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  SECTION("one destination shard too many") {
    Holdings h = good;
    h.dst_node.push_back(0);
    const auto r = make_plan(from, to, h);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  SECTION("swapped layouts") {
    const auto r = make_plan(to, from, good);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
  }
  SECTION("a node id outside [0, num_nodes)") {
    for (auto mutate : std::initializer_list<void (*)(Holdings&)>{
             [](Holdings& h) { h.src_nodes[1] = {1}; },
             [](Holdings& h) { h.src_nodes[0] = {0, -1}; },
             [](Holdings& h) { h.dst_node[2] = 1; },
             [](Holdings& h) { h.dst_node[0] = -1; },
             [](Holdings& h) { h.num_nodes = 0; },
         }) {
      Holdings h = good;
      mutate(h);
      const auto r = make_plan(from, to, h);
      REQUIRE_FALSE(r.is_ok());
      CHECK(r.status().code() == Code::kInvalidArgument);
    }
  }
}

TEST_CASE("a needed shard held by no node is an error; an unneeded one is not", "[plan]") {
  SECTION("the only source of rows 4-7 is held nowhere") {
    const Ptc p = ptc_of(R"({"w": {"dtype": "F32", "shape": [8, 4], "tp_dim": 0}})");
    const Layout from = layout_of(p, 2), to = layout_of(p, 1);
    Holdings h = Holdings::single_node(from, to);
    h.src_nodes[1].clear();
    const auto r = make_plan(from, to, h);
    REQUIRE_FALSE(r.is_ok());
    CHECK_THAT(r.status().message(), Catch::Contains("'w'"));
  }
  SECTION("a replicated tensor is read from the shard that is held") {
    const Ptc p = ptc_of(R"({"emb": {"dtype": "F32", "shape": [4, 4]}})");
    const Layout from = layout_of(p, 2), to = layout_of(p, 2);
    Holdings h = Holdings::single_node(from, to);
    h.src_nodes[1].clear();
    const Plan plan = plan_of(from, to, h);
    CHECK(copy_rows(plan) == std::vector<CopyRow>{{0, 0, 0, 0, 0, 0, 0, 0, 4}, {0, 0, 0, 1, 0, 0, 0, 0, 4}});
    CHECK(plan_problem(from, to, h, plan, true) == "");
  }
}
