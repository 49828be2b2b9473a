#include "ptc/formats/rank_file.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "ptc/plan.h"

namespace ptcfs::formats {

Result<std::vector<size_t>> match_rank_header(const ptc::Layout& layout, const ptc::ShardId& shard,
                                              const SafetensorsHeader& header, const std::string& path) {
  std::vector<size_t> entry_of_slice;
  std::map<std::string_view, size_t> by_name;
  for (size_t i = 0; i < header.entries.size(); ++i) by_name[header.entries[i].name] = i;
  for (const auto& sl : layout.slices(shard)) {
    const auto& spec = layout.tensor(sl);
    auto it = by_name.find(spec.name);
    if (it == by_name.end())
      return invalid(path + ": tensor '" + spec.name + "' is missing (ptc.json places it in shard " + shard.name() +
                     ")");
    const auto& e = header.entries[it->second];
    if (e.dtype != spec.dtype)
      return invalid(path + ": tensor '" + spec.name + "' has dtype " + ptc::dtype_name(e.dtype) +
                     " but ptc.json says " + ptc::dtype_name(spec.dtype));
    if (e.shape != sl.local_shape)
      return invalid(path + ": tensor '" + spec.name + "' has shape " + ptc::shape_string(e.shape) + " but shard " +
                     shard.name() + " of " + layout.parallelism().to_string() + " holds a slice of shape " +
                     ptc::shape_string(sl.local_shape));
    entry_of_slice.push_back(it->second);
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    const std::string name(by_name.begin()->first);
    if (!layout.ptc().find(name)) return invalid(path + ": tensor '" + name + "' is not in ptc.json");
    return invalid(path + ": tensor '" + name + "' does not belong to shard " + shard.name() +
                   " (wrong pipeline stage)");
  }
  return entry_of_slice;
}

Result<PaddingRanges> layout_padding(const ptc::Layout& layout) {
  // The fills of the layout's plan onto itself are exactly its padding.
  PTC_ASSIGN_OR_RETURN(ptc::Plan self, ptc::make_plan(layout, layout, ptc::Holdings::single_node(layout, layout)));
  PaddingRanges out(layout.shards().size());
  for (size_t s = 0; s < out.size(); ++s) out[s].resize(layout.slices(layout.shards()[s]).size());
  for (const ptc::Fill& f : self.fills) {
    auto& ranges = out[f.dst_shard][f.dst_slice];
    ptc::for_each_fill_run(layout, f, [&](const ptc::Run& r) {
      ranges.emplace_back(static_cast<uint64_t>(r.dst), static_cast<uint64_t>(r.len));
    });
  }
  for (auto& shard : out)
    for (auto& ranges : shard) std::sort(ranges.begin(), ranges.end());
  return out;
}

}  // namespace ptcfs::formats
