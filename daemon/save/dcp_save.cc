#include "daemon/save/dcp_save.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "ptc/chunk_layout.h"
#include "ptc/formats/npy.h"
#include "ptc/layout.h"
#include "ptc/formats/torch_archive.h"
#include "ptc/region.h"

namespace ptcfs {

namespace {

// What one write into a tensor file carries at most (bounded memory for any chunk size).
constexpr uint64_t kCopyPiece = 8 << 20;

std::string dims(const ptc::Shape& s) { return ptc::shape_string(s); }

// The C-order strides of `shape`, in elements.
ptc::Shape c_strides(const ptc::Shape& shape) {
  ptc::Shape out(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) out[i - 1] = out[i] * std::max<int64_t>(shape[i], 1);
  return out;
}

// A chunk's record lies in C order when every dimension longer than 1 has the C stride.
bool c_order(const ptc::Shape& shape, const ptc::Shape& stride) {
  if (stride.size() != shape.size()) return false;
  const ptc::Shape want = c_strides(shape);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] > 1 && stride[i] != want[i]) return false;
  return true;
}

Status check_name(const std::string& fqn, const std::string& where) {
  if (auto s = ptc::validate_tensor_name(fqn); !s) return invalid(where + ": DCP entry '" + fqn + "': " + s.message());
  if (fqn.rfind("__dcp__/", 0) == 0)
    return invalid(where + ": DCP entry '" + fqn + "': names under __dcp__/ are ptcfs's own");
  return Status::ok();
}

ptc::Box box_of(const formats::DcpChunk& c) {
  ptc::Box box;
  box.lo = c.offsets;
  box.hi.resize(c.offsets.size());
  for (size_t i = 0; i < c.offsets.size(); ++i) box.hi[i] = c.offsets[i] + c.sizes[i];
  return box;
}

// The box of the tensor a slice's file holds, padding included (a split like chunks has at most
// one piece: the file is that piece's box, grown by its padding).
ptc::Box frame_of(const ptc::Slice& sl) {
  ptc::Box f = ptc::Box::of_shape(sl.local_shape);
  if (sl.pieces.empty()) return f;
  const auto& pc = sl.pieces.front();
  std::vector<int64_t> by(f.lo.size());
  for (size_t d = 0; d < by.size(); ++d) by[d] = pc.global.lo[d] - pc.local.lo[d];
  return f.translated(by);
}

// A tensor chunk and its torch.save record, checked against each other.
struct ChunkRecord {
  const formats::DcpChunk* chunk = nullptr;
  formats::TorchTensorItem rec;
};

Status check_record(const formats::DcpItem& t, const formats::DcpChunk& c, const formats::TorchTensorItem& rec,
                    const std::string& where) {
  const std::string at = where + ": chunk of '" + t.fqn + "' at " + dims(c.offsets);
  if (rec.dtype != t.dtype)
    return invalid(at + " holds " + ptc::dtype_name(rec.dtype) + " where the metadata says " +
                   ptc::dtype_name(t.dtype));
  if (rec.shape != c.sizes)
    return invalid(at + " holds shape " + dims(rec.shape) + " where the metadata says " + dims(c.sizes));
  return Status::ok();
}

// The copies of the part `region` of a tensor chunk into a file holding `frame`: the record's
// bytes in C order, run by run, or one gather of a record in another order.
Status chunk_copies(const formats::DcpItem& t, const ChunkRecord& cr, const ptc::Box& region, const ptc::Box& frame,
                    const std::string& where, DcpTensorFile& out) {
  const formats::DcpChunk& c = *cr.chunk;
  const formats::TorchTensorItem& rec = cr.rec;
  const uint64_t elem = ptc::dtype_size(t.dtype);
  const uint64_t base = c.offset + rec.data_offset + rec.storage_offset * elem;
  if (!c_order(rec.shape, rec.stride)) {
    // The record's extent is inside its storage record (torch_item.h checked it), so this sum
    // does not overflow.
    uint64_t last = 0;
    for (size_t i = 0; i < rec.shape.size(); ++i)
      last += static_cast<uint64_t>(rec.shape[i] - 1) * static_cast<uint64_t>(rec.stride[i]);
    const uint64_t span = (last + 1) * elem;
    if (span > kMaxDcpGather)
      return invalid(where + ": chunk of '" + t.fqn + "' at " + dims(c.offsets) + " is stored with strides " +
                     dims(rec.stride) + " (not in C order) over " + std::to_string(span) +
                     " bytes, more than ptcfs puts in order in memory (1 GiB): save it contiguous");
    out.gathers.push_back({c.file, base, span, c.offsets, c.sizes, rec.stride, region, frame});
    return Status::ok();
  }
  if (t.size.empty()) {
    out.copies.push_back({c.file, base, 0, elem});
    return Status::ok();
  }
  ptc::for_each_run(region, box_of(c), frame, elem, [&](const ptc::Run& r) {
    out.copies.push_back(
        {c.file, base + static_cast<uint64_t>(r.src), static_cast<uint64_t>(r.dst), static_cast<uint64_t>(r.len)});
  });
  return Status::ok();
}

// The padding of a slice: the local box past its piece along the split dimension (all of it
// when the slice has no piece).
void padding(const ptc::TensorSpec& spec, const ptc::Slice& sl, DcpTensorFile& out) {
  const uint64_t elem = ptc::dtype_size(spec.dtype);
  const ptc::Box local = ptc::Box::of_shape(sl.local_shape);
  if (sl.pieces.empty()) {
    if (const auto n = static_cast<uint64_t>(local.num_elements()) * elem) out.zeros.push_back({0, n});
    return;
  }
  if (!spec.tp_dim || sl.pieces.front().local == local) return;
  ptc::Box pad = local;
  const auto d = static_cast<size_t>(*spec.tp_dim);
  pad.lo[d] = sl.pieces.front().local.hi[d];
  ptc::for_each_run(pad, local, local, elem, [&](const ptc::Run& r) {
    out.zeros.push_back({static_cast<uint64_t>(r.dst), static_cast<uint64_t>(r.len)});
  });
}

std::string planner_json(const formats::DcpMetadata& md) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [fqn, path] : md.planner_data) {
    nlohmann::json keys = nlohmann::json::array();
    for (const auto& k : path) {
      if (const auto* s = std::get_if<std::string>(&k))
        keys.push_back(*s);
      else
        keys.push_back(std::get<int64_t>(k));
    }
    j[fqn] = std::move(keys);
  }
  return j.dump();
}

ptc::TensorSpec spec(const std::string& name, ptc::DType dtype, const ptc::Shape& shape) {
  ptc::TensorSpec s;
  s.name = name;
  s.dtype = dtype;
  s.shape = shape;
  return s;
}

// One entry of the save: its tensor, and where its bytes come from.
struct Entry {
  ptc::TensorSpec spec;
  const formats::DcpItem* item = nullptr;  // none: the planner data
  std::vector<ChunkRecord> chunks;         // a tensor item's non-empty chunks
  std::vector<ptc::Box> boxes;             // their boxes
};

Result<Entry> entry_of(const formats::DcpItem& t, const DcpItemReader& item, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_name(t.fqn, where));
  Entry e;
  e.item = &t;
  if (t.bytes) {
    if (t.chunks.size() != 1) return invalid(where + ": bytes item '" + t.fqn + "' without one storage entry");
    e.spec = spec(kDcpBytesPrefix + t.fqn, ptc::DType::U8, {static_cast<int64_t>(t.chunks[0].length)});
    return e;
  }
  e.spec = spec(t.fqn, t.dtype, t.size);
  for (const auto& c : t.chunks) {
    if (ptc::num_elements(c.sizes) == 0) continue;
    PTC_ASSIGN_OR_RETURN(formats::TorchTensorItem rec, item(t, c));
    PTC_RETURN_IF_ERROR(check_record(t, c, rec, where));
    e.chunks.push_back({&c, std::move(rec)});
    e.boxes.push_back(box_of(c));
  }
  ptc::split_like_chunks(e.spec, e.boxes);
  return e;
}

// The bytes the step's files hold at `tp`: a split tensor padded to ceil(N / tp) per slice, every
// other entry (replicated tensors, bytes items, the planner data) once per shard.
long double stored_bytes(const std::vector<Entry>& entries, int tp) {
  long double total = 0;
  for (const auto& e : entries) {
    const long double n = static_cast<long double>(ptc::num_elements(e.spec.shape)) * ptc::dtype_size(e.spec.dtype);
    if (!e.spec.tp_dim) {
      total += n * tp;
      continue;
    }
    const auto len = static_cast<long double>(e.spec.shape[static_cast<size_t>(*e.spec.tp_dim)]);
    if (len > 0) total += n / len * (std::ceil(len / tp) * tp);
  }
  return total;
}

// The tp of the step: the one whose slices are the chunks of the most bytes, unless the
// tensors no chunk splits would then be stored more often than the split ones are big (a
// layout of replicas is kept whole: tp 1, each tensor's split still recorded for later), or the
// files would hold more than twice the save's bytes (padding and copies of every other entry: a
// crafted .metadata cannot make the daemon write much more than it was given). ptcfs's own
// entries (bytes items, planner data) are not weighed in the first rule: they are small.
int step_tp(const ptc::Ptc& ptc, const std::vector<Entry>& entries) {
  std::vector<std::vector<ptc::Box>> boxes;
  uint64_t split = 0, whole = 0;
  for (const auto& e : entries) {
    boxes.push_back(e.boxes);
    const uint64_t n = static_cast<uint64_t>(ptc::num_elements(e.spec.shape)) * ptc::dtype_size(e.spec.dtype);
    if (!e.spec.name.starts_with("__dcp__/")) (e.spec.tp_dim ? split : whole) += n;
  }
  const int tp = ptc::tp_for_chunks(ptc, boxes);
  if (tp == 1 || whole * static_cast<uint64_t>(tp - 1) > split) return 1;
  return stored_bytes(entries, tp) > 2 * stored_bytes(entries, 1) ? 1 : tp;
}

// The file of entry `e`'s slice at TP rank t.
Result<DcpTensorFile> file_of(const Entry& e, size_t index, int tp, int t, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(ptc::Slice sl, ptc::slice_of(e.spec, index, tp, t));
  DcpTensorFile f;
  f.name = e.spec.name;
  f.shard = t;
  f.dtype = e.spec.dtype;
  f.shape = sl.local_shape;
  if (!e.item) return f;  // the planner data: its bytes are set by the caller
  if (e.item->bytes) {
    const auto& c = e.item->chunks[0];
    if (c.length) f.copies.push_back({c.file, c.offset, 0, c.length});
    return f;
  }
  const ptc::Box frame = frame_of(sl);
  for (const auto& pc : sl.pieces)
    for (const auto& cr : e.chunks) {
      const ptc::Box region = e.spec.shape.empty() ? pc.global : ptc::intersect(box_of(*cr.chunk), pc.global);
      if (!e.spec.shape.empty() && region.empty()) continue;
      PTC_RETURN_IF_ERROR(chunk_copies(*e.item, cr, region, frame, where, f));
    }
  padding(e.spec, sl, f);
  return f;
}

}  // namespace

Result<DcpSave> plan_dcp_save(const formats::DcpMetadata& md, const DcpItemReader& item, const std::string& where) {
  std::vector<Entry> entries;
  for (const auto& t : md.items) {
    PTC_ASSIGN_OR_RETURN(Entry e, entry_of(t, item, where));
    entries.push_back(std::move(e));
  }
  Entry planner;
  const std::string planner_bytes = planner_json(md);
  planner.spec = spec(kDcpPlannerData, ptc::DType::U8, {static_cast<int64_t>(planner_bytes.size())});
  entries.push_back(std::move(planner));
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.spec.name < b.spec.name; });
  DcpSave out;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0 && entries[i].spec.name == entries[i - 1].spec.name)
      return invalid(where + ": DCP entry '" + entries[i].spec.name + "' appears twice");
    out.ptc.tensors.push_back(entries[i].spec);
  }
  if (auto s = ptc::validate_tensor_names(out.ptc.tensors); !s)
    return invalid(where + ": the PTC of this DCP save: " + s.message());
  out.ptc.parallelism = {1, 1, 1};
  const int tp = step_tp(out.ptc, entries);
  out.ptc.parallelism.tp = tp;
  for (size_t i = 0; i < entries.size(); ++i)
    for (int t = 0; t < tp; ++t) {
      PTC_ASSIGN_OR_RETURN(DcpTensorFile f, file_of(entries[i], i, tp, t, where));
      if (!entries[i].item) f.bytes = planner_bytes;
      for (const auto& c : f.copies) out.bytes += c.len;
      for (const auto& g : f.gathers)
        out.bytes += static_cast<uint64_t>(g.region.num_elements()) * ptc::dtype_size(f.dtype);
      out.files.push_back(std::move(f));
    }
  return out;
}

namespace {

// One file of the step written as a writer of the mount does: create, write, close.
class StepFile {
 public:
  static Result<StepFile> open(fs::WriteTarget& target, const std::string& job, const std::string& step,
                               const std::string& rel) {
    PTC_ASSIGN_OR_RETURN(auto f, target.create(job, step, rel));
    PTC_ASSIGN_OR_RETURN(uint64_t id, f->open_writer());
    return StepFile(std::move(f), id);
  }
  StepFile(StepFile&& o) noexcept : f_(std::move(o.f_)), id_(o.id_) { o.f_.reset(); }
  StepFile(const StepFile&) = delete;
  ~StepFile() {
    if (f_) f_->release(id_);
  }
  Status write(uint64_t off, std::string_view bytes) { return f_->write(id_, off, bytes.data(), bytes.size()); }
  Status close() {
    auto s = f_->flush(id_);
    f_->release(id_);
    f_.reset();
    return s;
  }

 private:
  StepFile(std::shared_ptr<fs::WriteFile> f, uint64_t id) : f_(std::move(f)), id_(id) {}
  std::shared_ptr<fs::WriteFile> f_;
  uint64_t id_ = 0;
};

// A chunk in another order than C's: its record read whole, its elements put in C order, then
// written as the runs of its box.
Status write_gather(StepFile& f, uint64_t base, const DcpTensorFile& t, const DcpGather& g, const DcpFileReader& read) {
  const size_t elem = ptc::dtype_size(t.dtype);
  PTC_ASSIGN_OR_RETURN(std::string span, read(g.file, g.src, g.span));
  const auto n = static_cast<size_t>(ptc::num_elements(g.sizes));
  std::string chunk(n * elem, '\0');
  std::vector<int64_t> idx(g.sizes.size(), 0);
  for (size_t k = 0; k < n; ++k) {
    uint64_t at = 0;
    for (size_t d = 0; d < idx.size(); ++d) at += static_cast<uint64_t>(idx[d]) * static_cast<uint64_t>(g.stride[d]);
    std::memcpy(chunk.data() + k * elem, span.data() + at * elem, elem);
    for (size_t d = idx.size(); d-- > 0;) {  // the odometer, last dimension fastest
      if (++idx[d] < g.sizes[d]) break;
      idx[d] = 0;
    }
  }
  ptc::Box box;
  box.lo = g.offsets;
  for (size_t i = 0; i < g.offsets.size(); ++i) box.hi.push_back(g.offsets[i] + g.sizes[i]);
  Status st = Status::ok();
  ptc::for_each_run(g.region, box, g.frame, elem, [&](const ptc::Run& r) {
    if (st) st = f.write(base + static_cast<uint64_t>(r.dst), std::string_view(chunk).substr(r.src, r.len));
  });
  return st;
}

Status write_tensor(fs::WriteTarget& target, const std::string& job, const std::string& step, const DcpTensorFile& t,
                    const DcpFileReader& read) {
  const std::string rel = ptc::ShardId{t.shard, 0}.name() + "/" + t.name + ".npy";
  PTC_ASSIGN_OR_RETURN(StepFile f, StepFile::open(target, job, step, rel));
  const std::string header = formats::npy_header(t.dtype, t.shape);
  PTC_RETURN_IF_ERROR(f.write(0, header));
  const uint64_t base = header.size();
  if (!t.bytes.empty()) PTC_RETURN_IF_ERROR(f.write(base, t.bytes));
  for (const auto& c : t.copies) {
    for (uint64_t done = 0; done < c.len;) {
      const uint64_t n = std::min(kCopyPiece, c.len - done);
      PTC_ASSIGN_OR_RETURN(std::string piece, read(c.file, c.src + done, n));
      PTC_RETURN_IF_ERROR(f.write(base + c.dst + done, piece));
      done += n;
    }
  }
  for (const auto& g : t.gathers) PTC_RETURN_IF_ERROR(write_gather(f, base, t, g, read));
  static const std::string kZeros(kCopyPiece, '\0');
  for (const auto& z : t.zeros)
    for (uint64_t done = 0; done < z.len;) {
      const uint64_t n = std::min(kCopyPiece, z.len - done);
      PTC_RETURN_IF_ERROR(f.write(base + z.dst + done, std::string_view(kZeros).substr(0, n)));
      done += n;
    }
  return f.close();
}

}  // namespace

std::vector<std::string> dcp_shard_holders(const DcpSave& save, const std::map<std::string, std::string>& file_nodes,
                                           const std::string& fallback) {
  const auto tp = static_cast<size_t>(std::max(1, save.ptc.parallelism.tp));
  std::vector<std::map<std::string, uint64_t>> weight(tp);  // per shard: node -> bytes from its files
  auto add = [&](int shard, const std::string& file, uint64_t n) {
    auto it = file_nodes.find(file);
    if (it != file_nodes.end() && static_cast<size_t>(shard) < tp) weight[static_cast<size_t>(shard)][it->second] += n;
  };
  for (const auto& t : save.files) {
    for (const auto& c : t.copies) add(t.shard, c.file, c.len);
    for (const auto& g : t.gathers) add(t.shard, g.file, g.span);
  }
  std::vector<std::string> out(tp, fallback);
  for (size_t s = 0; s < tp; ++s) {
    uint64_t best = 0;
    for (const auto& [node, n] : weight[s])  // by name: the first of equals stays
      if (n > best) {
        best = n;
        out[s] = node;
      }
  }
  return out;
}

Status write_dcp_tensors(fs::WriteTarget& target, const std::string& job, const std::string& step, const DcpSave& save,
                         const DcpFileReader& read, const std::vector<bool>& mine) {
  for (const auto& t : save.files) {
    if (!mine.empty() && (static_cast<size_t>(t.shard) >= mine.size() || !mine[static_cast<size_t>(t.shard)])) continue;
    PTC_RETURN_IF_ERROR(write_tensor(target, job, step, t, read));
  }
  return Status::ok();
}

Status write_dcp_ptc(fs::WriteTarget& target, const std::string& job, const std::string& step, const DcpSave& save) {
  PTC_ASSIGN_OR_RETURN(StepFile f, StepFile::open(target, job, step, "ptc.json"));
  PTC_RETURN_IF_ERROR(f.write(0, ptc::ptc_to_json(save.ptc)));
  return f.close();
}

}  // namespace ptcfs
