#include "fs/dcp_views.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "fs/composed_file.h"
#include "ptc/formats/dcp_metadata.h"
#include "ptc/formats/npy.h"
#include "ptc/formats/torch_archive.h"

namespace ptcfs::fs {
namespace {

constexpr std::string_view kBytesPrefix = "__dcp__/bytes/";
constexpr std::string_view kReserved = "__dcp__/";

// Whether a piece of a slice is whole rows of it (a contiguous range of its bytes).
bool whole_rows(const ptc::Piece& pc, const ptc::Shape& local) {
  for (size_t d = 1; d < local.size(); ++d)
    if (pc.local.lo[d] != 0 || pc.local.hi[d] != local[d]) return false;
  return true;
}

// Whether a slice's pieces tile it with one shift (fused parts at tp 1, no padding): then the
// whole slice is one box of the tensor, at that shift.
bool one_box(const ptc::Slice& sl) {
  if (sl.pieces.empty()) return false;
  const auto& first = sl.pieces.front();
  int64_t covered = 0;
  for (const auto& pc : sl.pieces) {
    for (size_t d = 0; d < pc.local.lo.size(); ++d)
      if (pc.global.lo[d] - pc.local.lo[d] != first.global.lo[d] - first.local.lo[d]) return false;
    covered += pc.local.num_elements();
  }
  return covered == ptc::num_elements(sl.local_shape);
}

ptc::Shape extent(const ptc::Box& b) {
  ptc::Shape s(b.lo.size());
  for (size_t d = 0; d < s.size(); ++d) s[d] = b.hi[d] - b.lo[d];
  return s;
}

// How a tensor shows in the folder: not at all (a reserved name), as a bytes item, as chunks of
// the slices covering it (each slice one box, or every piece whole rows of its slice), or as one
// whole-tensor archive in full.distcp.
enum class Shown { kHidden, kBytes, kSlices, kFull };

Shown how_shown(const ptc::Layout& layout, size_t tensor, const std::vector<std::pair<ptc::ShardId, size_t>>& cover) {
  const std::string_view name = layout.ptc().tensors[tensor].name;
  if (name.starts_with(kReserved))
    return name.starts_with(kBytesPrefix) && cover.size() == 1 ? Shown::kBytes : Shown::kHidden;
  for (const auto& [shard, slice] : cover) {
    const auto& sl = layout.slices(shard)[slice];
    if (one_box(sl)) continue;
    for (const auto& pc : sl.pieces)
      if (!whole_rows(pc, sl.local_shape)) return Shown::kFull;
  }
  return Shown::kSlices;
}

// One archive of `dtype` and `shape` in `file`, its data the segment `data` (its len set here).
formats::DcpChunk archive(ComposedFiles& files, const std::string& file, ptc::DType dtype, const ptc::Shape& shape,
                          Segment data) {
  formats::TorchArchive a = formats::torch_tensor_archive(dtype, shape);
  formats::DcpChunk c;
  c.file = file;
  c.offset = files.end(file);
  c.length = a.size();
  c.sizes = shape;
  files.mem(file, std::move(a.head));
  data.len = a.data_bytes;
  files.add(file, std::move(data));
  files.mem(file, std::move(a.tail));
  return c;
}

// The (shard, slice) pairs that show a tensor: Layout::covering, except that a replicated tensor
// (one slice, the whole tensor) comes from a TP rank of its stage that this node holds, when
// one does: on a cluster each node's view then reads it locally (every node's .metadata lists
// the same chunks; only the file that holds them differs).
std::vector<std::pair<ptc::ShardId, size_t>> cover_of(const StepContent& c, size_t tensor) {
  const auto& layout = c.layout();
  auto cover = layout.covering(tensor);
  if (cover.size() != 1 || layout.ptc().tensors[tensor].tp_dim || c.holds(cover[0].first)) return cover;
  for (int t = 0; t < layout.parallelism().tp; ++t) {
    const ptc::ShardId s{t, cover[0].first.p};
    const int slice = layout.find_slice(s, tensor);
    if (slice >= 0 && c.holds(s)) return {{s, static_cast<size_t>(slice)}};
  }
  return cover;
}

// Every file of the folder, built (what its LazyFolder builds on first use).
FolderFiles build_files(const std::shared_ptr<const StepContent>& c) {
  const auto& layout = c->layout();
  const auto& tensors = layout.ptc().tensors;
  ComposedFiles files;
  std::vector<formats::DcpItem> items;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& spec = tensors[i];
    const auto cover = cover_of(*c, i);
    const size_t elem = ptc::dtype_size(spec.dtype);
    const Shown shown = how_shown(layout, i, cover);
    if (shown == Shown::kHidden) continue;
    if (shown == Shown::kBytes) {
      const auto& [shard, slice] = cover.front();
      formats::DcpItem it;
      it.fqn = spec.name.substr(kBytesPrefix.size());
      it.bytes = true;
      formats::DcpChunk ch;
      ch.file = shard.name() + ".distcp";
      ch.offset = files.end(ch.file);
      ch.length = layout.bytes(layout.slices(shard)[slice]);
      Segment s;
      s.len = ch.length;
      s.shard = shard;
      s.slice = slice;
      files.add(ch.file, std::move(s));
      it.chunks.push_back(std::move(ch));
      items.push_back(std::move(it));
      continue;
    }
    formats::DcpItem it;
    it.fqn = spec.name;
    it.dtype = spec.dtype;
    it.size = spec.shape;
    if (shown == Shown::kSlices) {  // every slice one box, or every piece a range of its slice: an archive each
      for (const auto& [shard, slice] : cover) {
        const auto& sl = layout.slices(shard)[slice];
        const std::string file = shard.name() + ".distcp";
        if (one_box(sl)) {
          Segment data;
          data.shard = shard;
          data.slice = slice;
          formats::DcpChunk ch = archive(files, file, spec.dtype, sl.local_shape, std::move(data));
          ch.offsets = sl.pieces.front().global.lo;
          for (size_t d = 0; d < ch.offsets.size(); ++d) ch.offsets[d] -= sl.pieces.front().local.lo[d];
          it.chunks.push_back(std::move(ch));
          continue;
        }
        uint64_t row = elem;
        for (size_t d = 1; d < sl.local_shape.size(); ++d) row *= static_cast<uint64_t>(sl.local_shape[d]);
        for (const auto& pc : sl.pieces) {
          Segment data;
          data.shard = shard;
          data.slice = slice;
          data.src = pc.local.lo.empty() ? 0 : static_cast<uint64_t>(pc.local.lo[0]) * row;
          formats::DcpChunk ch = archive(files, file, spec.dtype, extent(pc.global), std::move(data));
          ch.offsets = pc.global.lo;
          it.chunks.push_back(std::move(ch));
        }
      }
    } else {  // one archive of the whole tensor, read through its full view
      Segment data;
      data.view = full_npy_view(c, i);
      data.src = formats::npy_header(spec.dtype, spec.shape).size();
      formats::DcpChunk ch = archive(files, "full.distcp", spec.dtype, spec.shape, std::move(data));
      ch.offsets = ptc::Shape(spec.shape.size(), 0);
      it.chunks.push_back(std::move(ch));
    }
    items.push_back(std::move(it));
  }
  FolderFiles out = files.views(c, metrics::ViewKind::kDcp);
  out.emplace(".metadata", bytes_view(formats::dcp_metadata(items)));
  return out;
}

// The names of the folder's files, from the layout and the shards held alone (as build_files
// would make them).
std::set<std::string> file_names(const StepContent& c) {
  const auto& layout = c.layout();
  // Marked per shard, the names made once at the end: a step of 100,000 tensors built a string per
  // tensor here at every change.
  std::vector<char> shown(layout.shards().size(), 0);
  bool full = false;
  for (size_t i = 0; i < layout.ptc().tensors.size(); ++i) {
    const auto cover = cover_of(c, i);
    switch (how_shown(layout, i, cover)) {
      case Shown::kHidden:
        break;
      case Shown::kFull:
        full = true;
        break;
      case Shown::kBytes:
      case Shown::kSlices:
        for (const auto& [shard, slice] : cover)
          shown[static_cast<size_t>(shard.p) * layout.parallelism().tp + shard.t] = 1;
        break;
    }
  }
  std::set<std::string> names{".metadata"};
  if (full) names.insert("full.distcp");
  for (size_t k = 0; k < shown.size(); ++k)
    if (shown[k]) names.insert(layout.shards()[k].name() + ".distcp");
  return names;
}

}  // namespace

std::vector<std::pair<std::string, std::shared_ptr<const View>>> dcp_views(
    const std::shared_ptr<const StepContent>& c) {
  // The folder's bytes (about 1.3 KB of archive headers and metadata per chunk) are made when a
  // file of it is first sized or read.
  auto folder = std::make_shared<const LazyFolder>([c] { return build_files(c); });
  std::vector<std::pair<std::string, std::shared_ptr<const View>>> out;
  for (const std::string& name : file_names(*c)) {
    const bool meta = name == ".metadata";
    out.emplace_back(name, lazy_folder_file(folder, name, c->version(),
                                            meta ? metrics::ViewKind::kMetadata : metrics::ViewKind::kDcp,
                                            [reads = metrics::DcpReads(name)](uint64_t n) { reads.add(n); }));
  }
  return out;
}

}  // namespace ptcfs::fs
