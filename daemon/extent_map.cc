#include "daemon/extent_map.h"

#include <algorithm>
#include <unordered_map>

namespace ptcfs {
namespace {

// A destination byte range and where its bytes come from (src == nullptr: zeros).
struct Part {
  int64_t dst, len;
  const StoredSlice* src;
  int64_t src_off;
};

void push_extent(std::vector<Extent>& out, Extent e) {
  if (e.len == 0) return;
  if (!out.empty()) {
    Extent& last = out.back();
    if (last.blob == e.blob && (e.blob == kZeroBlob || last.offset + last.len == e.offset)) {
      last.len += e.len;
      return;
    }
  }
  out.push_back(e);
}

// Start offsets of a stored slice's extents, so a range is found by binary search.
class ExtentIndex {
 public:
  const std::vector<uint64_t>& starts(const StoredSlice& s) {
    auto [it, fresh] = cache_.try_emplace(&s);
    if (fresh) {
      uint64_t pos = 0;
      for (const Extent& e : s.extents) {
        it->second.push_back(pos);
        pos += e.len;
      }
      it->second.push_back(pos);  // the total
    }
    return it->second;
  }

 private:
  std::unordered_map<const StoredSlice*, std::vector<uint64_t>> cache_;
};

// Appends the extents holding bytes [off, off + len) of a stored slice.
void map_range(const StoredSlice& s, const std::vector<uint64_t>& starts, uint64_t off, uint64_t len,
               std::vector<Extent>& out) {
  size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end() - 1, off) - starts.begin()) - 1;
  for (; len > 0 && i < s.extents.size(); ++i) {
    const Extent& e = s.extents[i];
    const uint64_t skip = off - starts[i];
    const uint64_t n = std::min(len, e.len - skip);
    push_extent(out, Extent{e.blob, e.blob == kZeroBlob ? 0 : e.offset + skip, n});
    off += n;
    len -= n;
  }
}

}  // namespace

std::vector<std::vector<StoredSlice>> map_extents(
    const ptc::Layout& from, const ptc::Layout& to, const ptc::Plan& plan,
    const std::function<const StoredSlice&(uint32_t shard, uint32_t slice)>& source) {
  std::vector<std::vector<std::vector<Part>>> parts(to.shards().size());
  for (size_t s = 0; s < to.shards().size(); ++s) parts[s].resize(to.slices(to.shards()[s]).size());
  for (const ptc::Copy& c : plan.copies) {
    const StoredSlice* src = &source(c.src_shard, c.src_slice);
    auto& v = parts[c.dst_shard][c.dst_slice];
    ptc::for_each_copy_run(from, to, c, [&](const ptc::Run& r) { v.push_back(Part{r.dst, r.len, src, r.src}); });
  }
  for (const ptc::Fill& f : plan.fills) {
    auto& v = parts[f.dst_shard][f.dst_slice];
    ptc::for_each_fill_run(to, f, [&](const ptc::Run& r) { v.push_back(Part{r.dst, r.len, nullptr, 0}); });
  }
  ExtentIndex index;
  std::vector<std::vector<StoredSlice>> out(parts.size());
  for (size_t s = 0; s < parts.size(); ++s) {
    out[s].resize(parts[s].size());
    for (size_t j = 0; j < parts[s].size(); ++j) {
      auto& v = parts[s][j];
      std::sort(v.begin(), v.end(), [](const Part& a, const Part& b) { return a.dst < b.dst; });
      auto& ext = out[s][j].extents;
      for (const Part& p : v) {
        if (!p.src) push_extent(ext, Extent{kZeroBlob, 0, static_cast<uint64_t>(p.len)});
        else map_range(*p.src, index.starts(*p.src), static_cast<uint64_t>(p.src_off), static_cast<uint64_t>(p.len), ext);
      }
      // A slice whose extents are exactly one source slice's keeps its checksum.
      const StoredSlice* only = v.empty() ? nullptr : v[0].src;
      for (const Part& p : v) only = p.src == only ? only : nullptr;
      if (only && ext.size() == only->extents.size() &&
          std::equal(ext.begin(), ext.end(), only->extents.begin(), [](const Extent& a, const Extent& b) {
            return a.blob == b.blob && a.offset == b.offset && a.len == b.len;
          }))
        out[s][j].xxh3 = only->xxh3;
    }
  }
  return out;
}

}  // namespace ptcfs
