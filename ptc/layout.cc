#include "ptc/layout.h"

#include <algorithm>
#include <charconv>

namespace ptcfs::ptc {

std::string ShardId::name() const { return "tp" + std::to_string(t) + "-pp" + std::to_string(p); }

std::optional<ShardId> parse_shard_name(std::string_view name) {
  auto num = [](std::string_view s, int& out) {
    if (s.empty() || s.size() > 6 || (s.size() > 1 && s[0] == '0')) return false;
    // from_chars would take a leading '-' ("tp-1-pp0"); only digits are a shard index.
    if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && ptr == s.data() + s.size();
  };
  if (name.substr(0, 2) != "tp") return std::nullopt;
  const size_t dash = name.find("-pp");
  if (dash == std::string_view::npos) return std::nullopt;
  ShardId id;
  if (!num(name.substr(2, dash - 2), id.t) || !num(name.substr(dash + 3), id.p)) return std::nullopt;
  return id;
}

namespace {

std::vector<int> stages_for(const Placement& pl, int num_layers, int pp) {
  using K = Placement::Kind;
  switch (pl.kind) {
    case K::kFirst:
      return {0};
    case K::kLast:
      return {pp - 1};
    case K::kAll: {
      std::vector<int> all(pp);
      for (int i = 0; i < pp; ++i) all[i] = i;
      return all;
    }
    case K::kList:
      return pl.stages;
    case K::kLayer: {
      // Stage s holds base + (s < rem) layers, contiguous, in order.
      const int base = num_layers / pp, rem = num_layers % pp;
      int first = 0;
      for (int s = 0; s < pp; ++s) {
        const int n = base + (s < rem ? 1 : 0);
        if (pl.layer < first + n) return {s};
        first += n;
      }
      return {pp - 1};
    }
  }
  return {0};
}

}  // namespace

Result<Slice> slice_of(const TensorSpec& spec, size_t index, int tp, int t) {
  Slice s;
  s.tensor = index;
  const Box whole = Box::of_shape(spec.shape);
  if (!spec.tp_dim) {
    s.local_shape = spec.shape;
    s.pieces.push_back(Piece{whole, whole});
    return s;
  }
  const int k = *spec.tp_dim;
  const int64_t n = spec.shape[k];
  const std::string where = "tensor '" + spec.name + "'";
  if (spec.pad_to > 0) {
    const int64_t unit = spec.pad_to * tp;
    const int64_t padded = (n + unit - 1) / unit * unit;
    const int64_t c = padded / tp;
    s.local_shape = spec.shape;
    s.local_shape[k] = c;
    const int64_t g0 = static_cast<int64_t>(t) * c, g1 = std::min(g0 + c, n);
    if (g1 > g0) {
      Piece pc{Box::of_shape(s.local_shape), whole};
      pc.local.hi[k] = g1 - g0;
      pc.global.lo[k] = g0;
      pc.global.hi[k] = g1;
      s.pieces.push_back(std::move(pc));
    }
    return s;
  }
  // Megatron's rule (query groups divisible by tp): every rank holds whole heads.
  if (spec.heads > 0 && spec.heads % tp != 0)
    return invalid(where + ": dimension " + std::to_string(k) + " holds " + std::to_string(spec.heads) + " heads" +
                   (spec.parts > 1 ? " per part" : "") + ", which tp=" + std::to_string(tp) +
                   " does not divide (a rank would hold part of a head)");
  const int64_t q = n / spec.parts;
  if (q % tp != 0)
    return invalid(where + ": dimension " + std::to_string(k) + (spec.parts > 1 ? " part size " : " size ") +
                   std::to_string(q) + " is not divisible by tp=" + std::to_string(tp));
  const int64_t c = q / tp;
  s.local_shape = spec.shape;
  s.local_shape[k] = c * spec.parts;
  if (c == 0) return s;
  for (int j = 0; j < spec.parts; ++j) {
    Piece pc{Box::of_shape(s.local_shape), whole};
    pc.local.lo[k] = j * c;
    pc.local.hi[k] = (j + 1) * c;
    pc.global.lo[k] = j * q + t * c;
    pc.global.hi[k] = j * q + (t + 1) * c;
    s.pieces.push_back(std::move(pc));
  }
  return s;
}

Result<Layout> Layout::make(const Ptc& ptc, Parallelism par) {
  const std::string cfg = "config " + par.to_string();
  if (par.tp < 1 || par.pp < 1 || par.dp < 1) return invalid(cfg + ": every degree must be at least 1");
  if (ptc.num_layers > 0 && par.pp > ptc.num_layers)
    return invalid(cfg + ": more pipeline stages (" + std::to_string(par.pp) + ") than layers (" +
                   std::to_string(ptc.num_layers) + ")");
  Layout l;
  l.ptc_ = ptc;
  l.ptc_.parallelism = par;
  for (int p = 0; p < par.pp; ++p)
    for (int t = 0; t < par.tp; ++t) l.shards_.push_back(ShardId{t, p});
  // Each shard's slices counted first and reserved: a step of 100,000 tensors grew vectors of
  // megabytes by doubling, each growth fresh pages to fault in and a copy.
  std::vector<std::vector<int>> stages(l.ptc_.tensors.size());
  std::vector<size_t> per_stage(static_cast<size_t>(par.pp));
  for (size_t i = 0; i < l.ptc_.tensors.size(); ++i) {
    const TensorSpec& spec = l.ptc_.tensors[i];
    stages[i] = l.stages_of(spec);
    for (int s : stages[i]) {
      if (s >= par.pp)
        return invalid(cfg + ": tensor '" + spec.name + "' is placed on stage " + std::to_string(s) +
                       " but there are only " + std::to_string(par.pp) + " stages");
      ++per_stage[static_cast<size_t>(s)];
    }
  }
  std::vector<std::vector<Slice>> slices(l.shards_.size());
  for (size_t k = 0; k < slices.size(); ++k) slices[k].reserve(per_stage[k / static_cast<size_t>(par.tp)]);
  for (size_t i = 0; i < l.ptc_.tensors.size(); ++i) {
    const TensorSpec& spec = l.ptc_.tensors[i];
    for (int t = 0; t < par.tp; ++t) {
      PTC_ASSIGN_OR_RETURN(Slice sl, slice_of(spec, i, par.tp, t));
      for (size_t k = 0; k + 1 < stages[i].size(); ++k)
        slices[static_cast<size_t>(stages[i][k]) * par.tp + t].push_back(sl);
      if (!stages[i].empty()) slices[static_cast<size_t>(stages[i].back()) * par.tp + t].push_back(std::move(sl));
    }
  }
  // Tensors are visited in name order, so every shard's slices are sorted by name.
  l.slices_ = std::make_shared<const std::vector<std::vector<Slice>>>(std::move(slices));
  return l;
}

Result<Layout> Layout::at(Parallelism par) const {
  const Parallelism& now = ptc_.parallelism;
  if (par.tp != now.tp || par.pp != now.pp || par.dp < 1) return make(ptc_, par);
  Layout l = *this;
  l.ptc_.parallelism = par;
  return l;
}

const std::vector<Slice>& Layout::slices(const ShardId& s) const {
  return (*slices_)[static_cast<size_t>(s.p) * ptc_.parallelism.tp + s.t];
}

std::vector<int> Layout::stages_of(const TensorSpec& t) const {
  return stages_for(t.placement, ptc_.num_layers, ptc_.parallelism.pp);
}

int Layout::find_slice(const ShardId& s, size_t tensor_index) const {
  const auto& v = slices(s);
  auto it = std::lower_bound(v.begin(), v.end(), tensor_index, [](const Slice& a, size_t i) { return a.tensor < i; });
  return it != v.end() && it->tensor == tensor_index ? static_cast<int>(it - v.begin()) : -1;
}

std::vector<std::pair<ShardId, size_t>> Layout::covering(size_t tensor_index) const {
  const TensorSpec& spec = ptc_.tensors[tensor_index];
  const int p = stages_of(spec).front();
  const int ranks = spec.tp_dim ? ptc_.parallelism.tp : 1;
  std::vector<std::pair<ShardId, size_t>> out;
  for (int t = 0; t < ranks; ++t) {
    const ShardId id{t, p};
    const int i = find_slice(id, tensor_index);
    if (i >= 0) out.emplace_back(id, static_cast<size_t>(i));
  }
  return out;
}

}  // namespace ptcfs::ptc
