// A node's shards rebuilt over a durable copy (daemon/durable/copy_restore.h).
#include "daemon/durable/copy_restore.h"

#include <set>

#include "daemon/durable/durable_plan.h"
#include "daemon/reshard/extent_map.h"
#include "fs/views.h"
#include "ptc/plan.h"

namespace ptcfs::durable {

namespace {

// A plan of `to` from `copy` that reads, for shards `shards`, as few of the copy's files as it can:
// the files a TP-split tensor's bytes are in are needed whatever; a tensor replicated over TP (in
// every file of its stage) is taken from one of those (the planner prefers sources "on the
// destination's node": the needed files are placed there, the others on a second node).
Result<ptc::Plan> plan_from_fewest_files(const ptc::Layout& copy, const ptc::Layout& to,
                                         const std::vector<size_t>& shards) {
  PTC_ASSIGN_OR_RETURN(ptc::Plan any, ptc::make_plan(copy, to, ptc::Holdings::single_node(copy, to)));
  std::set<size_t> wanted(shards.begin(), shards.end()), needed;
  for (const auto& c : any.copies)
    if (wanted.count(c.dst_shard) && copy.ptc().tensors[c.tensor].tp_dim) needed.insert(c.src_shard);
  if (needed.empty()) return any;
  ptc::Holdings h;
  h.num_nodes = 2;
  h.dst_node.assign(to.shards().size(), 0);
  for (size_t i = 0; i < copy.shards().size(); ++i) h.src_nodes.push_back({needed.count(i) ? 0 : 1});
  return ptc::make_plan(copy, to, h);
}

}  // namespace

Result<CopyRestore> plan_copy_restore(const ptc::Layout& copy, const formats::ExportManifest& m, const std::string& dir,
                                      const ptc::Layout& to, const std::vector<size_t>& shards,
                                      const std::function<Result<uint64_t>(uint64_t size)>& new_blob) {
  // The copy as a version whose every slice is its range of its rank file, file i standing in
  // as blob i + 1 (0 is the zero blob) until the files used are known.
  const auto& files = copy.shards();
  std::vector<std::vector<StoredSlice>> source(files.size());
  std::vector<uint64_t> file_size(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    PTC_ASSIGN_OR_RETURN(const auto file, fs::shard_safetensors_layout(copy, files[i]),
                         "laying out " + rank_file(files[i]));
    const uint64_t data_start = file.header.size();
    const auto& slices = copy.slices(files[i]);
    for (size_t j = 0; j < slices.size(); ++j) {
      StoredSlice s;
      s.extents.push_back(Extent{i + 1, data_start + file.entries[j].begin, copy.bytes(slices[j]), 0});
      source[i].push_back(std::move(s));
    }
    file_size[i] = file.file_size();
  }
  PTC_ASSIGN_OR_RETURN(const ptc::Plan plan, plan_from_fewest_files(copy, to, shards));
  auto stored = map_extents(copy, to, plan,
                            [&](uint32_t shard, uint32_t slice) -> const StoredSlice& { return source[shard][slice]; });
  CopyRestore out;
  std::map<uint64_t, uint64_t> blob_of;  // file + 1 -> blob
  for (size_t s : shards) {
    if (s >= stored.size()) return invalid("shard " + std::to_string(s) + " is not in the layout");
    for (StoredSlice& slice : stored[s])
      for (Extent& e : slice.extents) {
        if (e.blob == kZeroBlob) continue;
        auto [it, fresh] = blob_of.emplace(e.blob, 0);
        if (fresh) {
          const size_t i = e.blob - 1;
          const std::string name = rank_file(files[i]);
          const formats::ExportFile* f = m.find(name);
          if (!f) return corrupt(dir + kManifest + " does not list " + name + ", a file of the copy's layout");
          if (f->size != file_size[i])
            return corrupt(dir + kManifest + " states " + std::to_string(f->size) + " bytes for " + name +
                           "; the copy's layout gives " + std::to_string(file_size[i]));
          PTC_ASSIGN_OR_RETURN(it->second, new_blob(f->size));
          out.blobs.push_back(EvictedBlob{it->second, f->size, f->xxh3, {CopyRange{0, f->size, dir + name, 0}}});
        }
        e.blob = it->second;
      }
    out.stored[s] = std::move(stored[s]);
  }
  return out;
}

}  // namespace ptcfs::durable
