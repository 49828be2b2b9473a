#include "daemon/reshard/extent_map.h"

#include <algorithm>
#include <optional>

namespace ptcfs {
namespace {

// A destination byte range and where its bytes come from (src == nullptr: zeros).
struct Part {
  int64_t dst, len;
  const StoredSlice* src;
  int64_t src_off;
};

// A slice in row form: `rows` rows of `lanes` (Extent with a stride).
struct RowForm {
  uint64_t rows = 1;
  std::vector<Extent> lanes;
};

// `s` seen as `rows` rows of `row` bytes each, or nullopt when its extents do not split
// into rows that way (then the flat path is taken).
std::optional<RowForm> as_rows(const StoredSlice& s, uint64_t rows, uint64_t row) {
  if (s.rows == rows) return RowForm{rows, s.extents};
  if (s.rows != 1 || s.extents.size() != 1 || s.extents[0].len != rows * row) return std::nullopt;
  const Extent& e = s.extents[0];
  return RowForm{rows, {Extent{e.blob, e.offset, row, e.blob == kZeroBlob ? 0 : row}}};
}

// Appends an extent, merged into the last when it continues it (same blob and stride,
// adjacent bytes; zeros always merge).
void push_lane(std::vector<Extent>& out, Extent e) {
  if (e.len == 0) return;
  if (!out.empty()) {
    Extent& last = out.back();
    const bool zero = last.blob == kZeroBlob && e.blob == kZeroBlob;
    if (zero || (last.blob == e.blob && last.stride == e.stride && last.offset + last.len == e.offset)) {
      last.len += e.len;
      return;
    }
  }
  out.push_back(e);
}

bool same_extents(const StoredSlice& a, const StoredSlice& b) {
  return a.rows == b.rows && a.extents.size() == b.extents.size() &&
         std::equal(a.extents.begin(), a.extents.end(), b.extents.begin(), [](const Extent& x, const Extent& y) {
           return x.blob == y.blob && x.offset == y.offset && x.len == y.len && x.stride == y.stride;
         });
}

// A destination slice in row form: parts are row byte ranges taken from source slices.
struct RowPart {
  uint64_t dst, len;
  const StoredSlice* src;  // nullptr: zeros
  uint64_t src_off;
};

}  // namespace

std::vector<std::vector<StoredSlice>> map_extents(
    const ptc::Layout& from, const ptc::Layout& to, const ptc::Plan& plan,
    const std::function<const StoredSlice&(uint32_t shard, uint32_t slice)>& source) {
  return map_extents(from, to, plan, [&](const ptc::Copy& c) {
    return CopySource{&source(c.src_shard, c.src_slice), 0};
  });
}

namespace {

using SourceFn = std::function<CopySource(const ptc::Copy&)>;

// Row geometry of a slice: rows = product of the dimensions before the slab dimension k,
// inner = bytes of one index along k within a row.
ptc::SlabGeometry geometry_of(const ptc::TensorSpec& t, const ptc::Shape& local) {
  return ptc::slab_geometry(t, local);
}

// Step 1: every destination slice's parts (row byte ranges from source slices, or zeros),
// sorted by destination offset; indexed like `to`'s shards, then slices.
std::vector<std::vector<std::vector<RowPart>>> row_parts(const ptc::Layout& to, const ptc::Plan& plan,
                                                         const SourceFn& source) {
  std::vector<std::vector<std::vector<RowPart>>> rparts(to.shards().size());
  for (size_t s = 0; s < to.shards().size(); ++s) rparts[s].resize(to.slices(to.shards()[s]).size());
  for (const ptc::Copy& c : plan.copies) {
    const auto& ds = to.slices(to.shards()[c.dst_shard])[c.dst_slice];
    const uint64_t inner = geometry_of(to.ptc().tensors[c.tensor], ds.local_shape).inner;
    const CopySource src = source(c);
    rparts[c.dst_shard][c.dst_slice].push_back(RowPart{static_cast<uint64_t>(c.dst_lo) * inner,
                                                       static_cast<uint64_t>(c.len) * inner, src.slice,
                                                       static_cast<uint64_t>(c.src_lo - src.lo) * inner});
  }
  for (const ptc::Fill& f : plan.fills) {
    const auto& ds = to.slices(to.shards()[f.dst_shard])[f.dst_slice];
    const uint64_t inner = geometry_of(to.ptc().tensors[f.tensor], ds.local_shape).inner;
    rparts[f.dst_shard][f.dst_slice].push_back(
        RowPart{static_cast<uint64_t>(f.dst_lo) * inner, static_cast<uint64_t>(f.len) * inner, nullptr, 0});
  }
  for (auto& shard : rparts)
    for (auto& v : shard)
      std::sort(v.begin(), v.end(), [](const RowPart& a, const RowPart& b) { return a.dst < b.dst; });
  return rparts;
}

// Step 2: the sources of a slice's parts in row form (nullopt for zeros), or nullopt when
// one of them does not split into the slice's rows.
std::optional<std::vector<std::optional<RowForm>>> row_forms(const std::vector<RowPart>& v, uint64_t rows) {
  if (rows == 0) return std::nullopt;
  std::vector<std::optional<RowForm>> forms;
  for (const RowPart& p : v) {
    if (!p.src) {
      forms.emplace_back();
      continue;
    }
    forms.push_back(as_rows(*p.src, rows, slice_bytes(*p.src) / rows));
    if (!forms.back()) return std::nullopt;
  }
  return forms;
}

// Step 3a: a slice in row form, each part mapped once through its source's lanes.
void map_rows(const std::vector<RowPart>& v, const std::vector<std::optional<RowForm>>& forms, uint64_t rows,
              StoredSlice& result) {
  result.rows = rows;
  for (size_t i = 0; i < v.size(); ++i) {
    const RowPart& p = v[i];
    if (!p.src) {
      push_lane(result.extents, Extent{kZeroBlob, 0, p.len, 0});
      continue;
    }
    uint64_t pos = 0;  // row offset of the current source lane
    for (const Extent& lane : forms[i]->lanes) {
      const uint64_t lo = std::max(pos, p.src_off), hi = std::min(pos + lane.len, p.src_off + p.len);
      if (lo < hi)
        push_lane(result.extents, Extent{lane.blob, lane.blob == kZeroBlob ? 0 : lane.offset + (lo - pos), hi - lo,
                                         lane.blob == kZeroBlob ? 0 : lane.stride});
      pos += lane.len;
    }
  }
  // One lane whose rows follow each other is one flat extent.
  if (result.rows > 1 && result.extents.size() == 1 &&
      (result.extents[0].stride == result.extents[0].len || result.extents[0].blob == kZeroBlob)) {
    result.extents[0].len *= result.rows;
    result.extents[0].stride = 0;
    result.rows = 1;
  }
  if (result.rows == 1)
    for (auto& e : result.extents) e.stride = 0;
}

// Step 3b, flat: a source that does not split into rows (not produced by ptcfs today; kept
// for robustness) is mapped byte run by byte run.
void map_flat(const ptc::Layout& from, const ptc::Layout& to, const ptc::Plan& plan, const SourceFn& source, size_t s,
              size_t j, StoredSlice& result) {
  std::vector<Part> flat;
  for (const ptc::Copy& c : plan.copies) {
    if (c.dst_shard != s || c.dst_slice != j) continue;
    const CopySource src = source(c);
    // Runs are in the source slice's bytes; a slab starting at lo != 0 is narrower
    // than its slice (and then no run spans two rows).
    const auto& ss = from.slices(from.shards()[c.src_shard])[c.src_slice];
    const ptc::SlabGeometry g = ptc::slab_geometry(from.tensor(ss), ss.local_shape);
    const int64_t slice_row = g.extent * static_cast<int64_t>(g.inner);
    const int64_t slab_row = g.rows ? static_cast<int64_t>(slice_bytes(*src.slice) / g.rows) : 0;
    ptc::for_each_copy_run(from, to, c, [&](const ptc::Run& r) {
      const int64_t at =
          src.lo == 0 ? r.src
                      : (r.src / slice_row) * slab_row + r.src % slice_row - src.lo * static_cast<int64_t>(g.inner);
      flat.push_back(Part{r.dst, r.len, src.slice, at});
    });
  }
  for (const ptc::Fill& f : plan.fills) {
    if (f.dst_shard != s || f.dst_slice != j) continue;
    ptc::for_each_fill_run(to, f, [&](const ptc::Run& r) { flat.push_back(Part{r.dst, r.len, nullptr, 0}); });
  }
  std::sort(flat.begin(), flat.end(), [](const Part& a, const Part& b) { return a.dst < b.dst; });
  for (const Part& p : flat) {
    if (!p.src)
      push_lane(result.extents, Extent{kZeroBlob, 0, static_cast<uint64_t>(p.len), 0});
    else
      for_each_piece(*p.src, static_cast<uint64_t>(p.src_off), static_cast<uint64_t>(p.len),
                     [&](uint64_t blob, uint64_t boff, uint64_t n) {
                       push_lane(result.extents, Extent{blob, boff, n, 0});
                     });
  }
}

// Step 4: a slice whose extents are exactly one source slice's keeps its checksum.
void keep_checksum(const std::vector<RowPart>& v, StoredSlice& result) {
  const StoredSlice* only = v.empty() ? nullptr : v[0].src;
  for (const RowPart& p : v) only = p.src == only ? only : nullptr;
  if (only && same_extents(result, *only)) result.xxh3 = only->xxh3;
}

}  // namespace

std::vector<std::vector<StoredSlice>> map_extents(const ptc::Layout& from, const ptc::Layout& to, const ptc::Plan& plan,
                                                  const SourceFn& source) {
  const auto rparts = row_parts(to, plan, source);
  std::vector<std::vector<StoredSlice>> out(rparts.size());
  for (size_t s = 0; s < rparts.size(); ++s) {
    const auto& slices = to.slices(to.shards()[s]);
    out[s].resize(rparts[s].size());
    for (size_t j = 0; j < rparts[s].size(); ++j) {
      const auto& v = rparts[s][j];
      const uint64_t rows = geometry_of(to.tensor(slices[j]), slices[j].local_shape).rows;
      // Row form when every source splits into the same rows; each part then maps once.
      if (auto forms = row_forms(v, rows))
        map_rows(v, *forms, rows, out[s][j]);
      else
        map_flat(from, to, plan, source, s, j, out[s][j]);
      keep_checksum(v, out[s][j]);
    }
  }
  return out;
}

}  // namespace ptcfs
