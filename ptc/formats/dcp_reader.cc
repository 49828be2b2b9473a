#include "ptc/formats/dcp_reader.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>

#include "ptc/formats/pickle_reader.h"
#include "ptc/formats/torch_archive.h"
#include "ptc/formats/torch_item.h"

namespace ptcfs::formats {
namespace {

constexpr std::string_view kMeta = "torch.distributed.checkpoint.metadata";
constexpr std::string_view kFs = "torch.distributed.checkpoint.filesystem";
// The chunks of one tensor may cut it into at most this many pieces on the grid of their
// boundaries (the exact-cover check marks each piece once).
constexpr uint64_t kMaxCells = uint64_t{1} << 22;

bool allowed_global(const PickleValue& g) {
  const std::string_view m = g.text, n = g.name;
  if (m == kMeta) {
    for (std::string_view c : {"Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
                               "TensorProperties", "_MEM_FORMAT_ENCODING", "MetadataIndex", "StorageMeta"}) {
      if (n == c) return true;
    }
    return false;
  }
  ptc::DType dt;
  return (m == kFs && n == "_StorageInfo") ||
         (m == "torch" && (n == "Size" || n == "strided" || dtype_from_torch_name(n, dt))) ||
         (m == "torch.serialization" && n == "_get_layout") || (m == "builtins" && n == "getattr") ||
         (m == "pathlib" && (n == "PosixPath" || n == "Path")) || (m == "pathlib._local" && n == "PosixPath") ||
         (m == "collections" && n == "OrderedDict");
}

std::string shape_of(const DcpChunk& c) {
  return "(offsets " + ptc::shape_string(c.offsets) + ", sizes " + ptc::shape_string(c.sizes) + ")";
}

class Reader {
 public:
  Reader(const PickleTree& t, const std::string& where) : t_(t), where_(where) {}

  Status bad(const std::string& what) const { return corrupt(where_ + ": " + what); }

  // Every global is on the allow list; every call is of a global, and getattr and _get_layout
  // only as DCP uses them.
  Status check_globals() const {
    for (PickleId id = 0; id < t_.size(); ++id) {
      const PickleValue& v = t_[id];
      if (v.kind == PickleKind::kGlobal && !allowed_global(v)) {
        return invalid(where_ + ": global " + v.text + "." + v.name + " is not allowed in a DCP .metadata");
      }
      if (v.kind != PickleKind::kObject) continue;
      if (t_[v.callable].kind != PickleKind::kGlobal) return bad("calls a " + t_.describe(v.callable));
      const std::vector<PickleId>& args = t_[v.args].items;
      if (t_.is_global(v.callable, "builtins", "getattr") &&
          !(args.size() == 2 && t_.is_global(args[0], kMeta, "_MEM_FORMAT_ENCODING") &&
            t_[args[1]].kind == PickleKind::kStr)) {
        return invalid(where_ + ": builtins.getattr is allowed only on _MEM_FORMAT_ENCODING");
      }
      if (t_.is_global(v.callable, "torch.serialization", "_get_layout") &&
          !(args.size() == 1 && t_[args[0]].kind == PickleKind::kStr && t_[args[0]].text == "torch.strided")) {
        return invalid(where_ + ": only the layout 'torch.strided' is supported");
      }
    }
    return Status::ok();
  }

  // The fields of an object of module.cls made with no arguments and given a dict by BUILD (or
  // nothing when `optional_state`), every key one of `known`.
  Result<std::map<std::string, PickleId>> fields(PickleId id, std::string_view module, std::string_view cls,
                                                 std::initializer_list<std::string_view> known, const std::string& what,
                                                 bool optional_state = false) const {
    const PickleValue& o = t_[id];
    if (o.kind != PickleKind::kObject || !t_.is_global(o.callable, module, cls)) {
      return bad(what + " is a " + t_.describe(id) + ", not a " + std::string(cls));
    }
    if (!t_[o.args].items.empty() || o.kwargs != kNoPickleValue) return bad(what + " is made with arguments");
    std::map<std::string, PickleId> out;
    if (o.state == kNoPickleValue) {
      if (optional_state) return out;
      return bad(what + " has no state");
    }
    const PickleValue& d = t_[o.state];
    if (d.kind != PickleKind::kDict) return bad(what + "'s state is a " + t_.describe(o.state) + ", not a dict");
    for (size_t i = 0; i < d.items.size(); i += 2) {
      const PickleValue& k = t_[d.items[i]];
      if (k.kind != PickleKind::kStr) return bad(what + " has a key that is a " + t_.describe(d.items[i]));
      if (std::find(known.begin(), known.end(), k.text) == known.end()) {
        return bad(what + " has an unknown field '" + k.text + "'");
      }
      if (!out.emplace(k.text, d.items[i + 1]).second) return bad(what + " has the field '" + k.text + "' twice");
    }
    return out;
  }
  Result<PickleId> field(const std::map<std::string, PickleId>& f, const std::string& key,
                         const std::string& what) const {
    const auto it = f.find(key);
    if (it == f.end()) return bad(what + " has no field '" + key + "'");
    return it->second;
  }

  Result<int64_t> non_negative(PickleId id, const std::string& what) const {
    if (t_[id].kind != PickleKind::kInt || t_[id].integer < 0) {
      return bad(what + " is a " + t_.describe(id) + ", not a non-negative int");
    }
    return t_[id].integer;
  }
  Result<std::string> str(PickleId id, const std::string& what) const {
    if (t_[id].kind != PickleKind::kStr) return bad(what + " is a " + t_.describe(id) + ", not a str");
    return t_[id].text;
  }

  // torch.Size((d0, d1, ...)).
  Result<ptc::Shape> size(PickleId id, const std::string& what) const {
    const PickleValue& o = t_[id];
    if (o.kind != PickleKind::kObject || !t_.is_global(o.callable, "torch", "Size") || t_[o.args].items.size() != 1 ||
        o.state != kNoPickleValue) {
      return bad(what + " is a " + t_.describe(id) + ", not a torch.Size");
    }
    const PickleValue& dims = t_[t_[o.args].items[0]];
    if (dims.kind != PickleKind::kTuple && dims.kind != PickleKind::kList) return bad(what + " is not a tuple");
    if (dims.items.size() > kMaxDcpDims) {
      return invalid(where_ + ": " + what + " has " + std::to_string(dims.items.size()) + " dims, more than " +
                     std::to_string(kMaxDcpDims));
    }
    ptc::Shape s;
    for (PickleId d : dims.items) {
      PTC_ASSIGN_OR_RETURN(const int64_t x, non_negative(d, what + " dim"));
      s.push_back(x);
    }
    return s;
  }

  // TensorProperties: its dtype (the state is (dtype, layout, requires_grad, memory_format,
  // pin_memory[, strides]); the layout and memory format were checked with the globals).
  Result<ptc::DType> dtype(PickleId id, const std::string& what) const {
    const PickleValue& o = t_[id];
    if (o.kind != PickleKind::kObject || !t_.is_global(o.callable, kMeta, "TensorProperties") ||
        o.state == kNoPickleValue || t_[o.state].kind != PickleKind::kTuple ||
        (t_[o.state].items.size() != 5 && t_[o.state].items.size() != 6)) {
      return bad(what + " is a " + t_.describe(id) + ", not TensorProperties of 5 or 6 values");
    }
    const PickleValue& d = t_[t_[o.state].items[0]];
    ptc::DType dt;
    if (d.kind != PickleKind::kGlobal || d.text != "torch" || !dtype_from_torch_name(d.name, dt)) {
      return bad(what + " has a dtype that is a " + t_.describe(t_[o.state].items[0]));
    }
    return dt;
  }

  Result<std::vector<DcpPathElement>> key_path(PickleId id, const std::string& what) const {
    const PickleValue& p = t_[id];
    if (p.kind != PickleKind::kTuple && p.kind != PickleKind::kList) return bad(what + " is not a tuple");
    std::vector<DcpPathElement> out;
    for (PickleId e : p.items) {
      if (t_[e].kind == PickleKind::kStr) {
        out.emplace_back(t_[e].text);
      } else if (t_[e].kind == PickleKind::kInt) {
        out.emplace_back(t_[e].integer);
      } else {
        return bad(what + " holds a " + t_.describe(e));
      }
    }
    return out;
  }

 private:
  const PickleTree& t_;
  const std::string& where_;
};

// Where a chunk's bytes lie, by (fqn, offsets), offsets absent for a bytes item.
using StorageKey = std::pair<std::string, std::optional<ptc::Shape>>;
struct StorageRef {
  std::string file;
  uint64_t offset = 0, length = 0;
  bool used = false;
};

Status check_file_name(const std::string& f, const std::string& what, const std::string& where) {
  if (f.empty() || f.size() > 255 || f == "." || f == ".." || f.find('/') != std::string::npos ||
      f.find('\0') != std::string::npos) {
    return invalid(where + ": " + what + " has relative_path '" + f.substr(0, 300) +
                   "', not a plain file name of 1 to 255 bytes");
  }
  return Status::ok();
}

Result<std::map<StorageKey, StorageRef>> storage_data(const Reader& r, const PickleTree& t, PickleId id,
                                                      const std::string& where) {
  if (t[id].kind != PickleKind::kDict) return r.bad("storage_data is a " + t.describe(id) + ", not a dict");
  std::map<StorageKey, StorageRef> out;
  const std::vector<PickleId>& kv = t[id].items;
  for (size_t i = 0; i < kv.size(); i += 2) {
    PTC_ASSIGN_OR_RETURN(const auto index,
                         r.fields(kv[i], kMeta, "MetadataIndex", {"fqn", "offset", "index"}, "a storage_data key"));
    PTC_ASSIGN_OR_RETURN(const PickleId fqn_id, r.field(index, "fqn", "a storage_data key"));
    PTC_ASSIGN_OR_RETURN(std::string fqn, r.str(fqn_id, "a storage_data key's fqn"));
    const std::string what = "storage_data of '" + fqn + "'";
    std::optional<ptc::Shape> offsets;
    if (index.count("offset") && t[index.at("offset")].kind != PickleKind::kNone) {
      PTC_ASSIGN_OR_RETURN(offsets, r.size(index.at("offset"), what + " offset"));
    }
    PTC_ASSIGN_OR_RETURN(
        const auto info,
        r.fields(kv[i + 1], kFs, "_StorageInfo", {"relative_path", "offset", "length", "transform_descriptors"}, what));
    if (info.count("transform_descriptors")) {
      const PickleValue& td = t[info.at("transform_descriptors")];
      if (td.kind != PickleKind::kNone && !td.items.empty()) {
        std::string names;
        for (PickleId d : td.items) {
          names += (names.empty() ? "" : ", ") + (t[d].kind == PickleKind::kStr ? t[d].text : t.describe(d));
        }
        return invalid(where + ": " + what + ": transform_descriptors [" + names + "] not supported");
      }
    }
    StorageRef ref;
    PTC_ASSIGN_OR_RETURN(const PickleId path, r.field(info, "relative_path", what));
    PTC_ASSIGN_OR_RETURN(ref.file, r.str(path, what + " relative_path"));
    PTC_RETURN_IF_ERROR(check_file_name(ref.file, what, where));
    PTC_ASSIGN_OR_RETURN(const PickleId off, r.field(info, "offset", what));
    PTC_ASSIGN_OR_RETURN(const PickleId len, r.field(info, "length", what));
    PTC_ASSIGN_OR_RETURN(const int64_t o, r.non_negative(off, what + " offset"));
    PTC_ASSIGN_OR_RETURN(const int64_t l, r.non_negative(len, what + " length"));
    ref.offset = static_cast<uint64_t>(o);
    ref.length = static_cast<uint64_t>(l);
    const std::string at = offsets ? " at " + ptc::shape_string(*offsets) : "";
    if (!out.emplace(StorageKey{std::move(fqn), std::move(offsets)}, std::move(ref)).second) {
      return r.bad(what + at + " is listed twice");
    }
  }
  return out;
}

// numel * itemsize below 2^63, overflow-safe.
bool fits(const ptc::Shape& size, ptc::DType dt) {
  uint64_t n = ptc::dtype_size(dt);
  for (int64_t d : size) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  return n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

// The chunks (each inside the tensor) cover every element exactly once. On the grid of all the
// chunks' boundaries every chunk is a union of whole cells, so marking cells finds an overlap
// (a cell marked twice) or a hole (a cell left unmarked) in O(cells + chunks), cells <= kMaxCells.
Status check_cover(const DcpItem& it, const std::string& where) {
  const size_t rank = it.size.size();
  const auto non_empty = [](const DcpChunk& c) {
    return std::all_of(c.sizes.begin(), c.sizes.end(), [](int64_t s) { return s > 0; });
  };
  std::vector<std::vector<int64_t>> cuts(rank);
  for (size_t d = 0; d < rank; ++d) cuts[d] = {0, it.size[d]};
  for (const DcpChunk& c : it.chunks) {
    if (!non_empty(c)) continue;
    for (size_t d = 0; d < rank; ++d) {
      cuts[d].push_back(c.offsets[d]);
      cuts[d].push_back(c.offsets[d] + c.sizes[d]);
    }
  }
  uint64_t cells = 1;
  std::vector<uint64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 0;) {
    std::sort(cuts[d].begin(), cuts[d].end());
    cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
    stride[d] = cells;
    cells *= cuts[d].size() - 1;  // 0 for an empty dim, which no non-empty chunk can be in
    if (cells > kMaxCells) {
      return invalid(where + ": the chunks of '" + it.fqn + "' cut it into more than " + std::to_string(kMaxCells) +
                     " pieces");
    }
  }
  constexpr uint32_t kFree = 0xFFFFFFFFu;
  std::vector<uint32_t> owner(cells, kFree);
  std::vector<size_t> lo(rank), hi(rank), i(rank);
  const auto corner = [&](const std::vector<size_t>& at) {
    ptc::Shape p(rank);
    for (size_t d = 0; d < rank; ++d) p[d] = cuts[d][at[d]];
    return ptc::shape_string(p);
  };
  for (size_t k = 0; k < it.chunks.size(); ++k) {
    const DcpChunk& c = it.chunks[k];
    if (!non_empty(c)) continue;
    for (size_t d = 0; d < rank; ++d) {
      lo[d] = static_cast<size_t>(std::lower_bound(cuts[d].begin(), cuts[d].end(), c.offsets[d]) - cuts[d].begin());
      hi[d] = static_cast<size_t>(std::lower_bound(cuts[d].begin(), cuts[d].end(), c.offsets[d] + c.sizes[d]) -
                                  cuts[d].begin());
    }
    i = lo;
    while (true) {
      uint64_t cell = 0;
      for (size_t d = 0; d < rank; ++d) cell += i[d] * stride[d];
      if (owner[cell] != kFree) {
        return corrupt(where + ": chunks " + std::to_string(owner[cell]) + " " + shape_of(it.chunks[owner[cell]]) +
                       " and " + std::to_string(k) + " " + shape_of(c) + " of '" + it.fqn + "' overlap at " +
                       corner(i));
      }
      owner[cell] = static_cast<uint32_t>(k);
      size_t d = rank;
      while (d > 0 && ++i[d - 1] == hi[d - 1]) {
        i[d - 1] = lo[d - 1];
        --d;
      }
      if (d == 0) break;
    }
  }
  for (uint64_t cell = 0; cell < cells; ++cell) {
    if (owner[cell] != kFree) continue;
    for (size_t d = 0; d < rank; ++d) i[d] = (cell / stride[d]) % (cuts[d].size() - 1);
    return corrupt(where + ": no chunk of '" + it.fqn + "' " + ptc::shape_string(it.size) + " holds the element at " +
                   corner(i));
  }
  return Status::ok();
}

Status check_tensor(const DcpItem& it, const std::string& where) {
  if (!fits(it.size, it.dtype)) {
    return invalid(where + ": '" + it.fqn + "' " + ptc::shape_string(it.size) + " of " + torch_dtype_name(it.dtype) +
                   " holds 2^63 bytes or more");
  }
  if (it.chunks.empty()) return corrupt(where + ": '" + it.fqn + "' has no chunks");
  for (size_t k = 0; k < it.chunks.size(); ++k) {
    const DcpChunk& c = it.chunks[k];
    bool inside = c.offsets.size() == it.size.size() && c.sizes.size() == it.size.size();
    for (size_t d = 0; inside && d < it.size.size(); ++d) {
      inside = c.offsets[d] <= it.size[d] && c.sizes[d] <= it.size[d] - c.offsets[d];
    }
    if (!inside) {
      return corrupt(where + ": chunk " + std::to_string(k) + " " + shape_of(c) + " of '" + it.fqn + "' lies outside " +
                     ptc::shape_string(it.size));
    }
  }
  return check_cover(it, where);
}

}  // namespace

Result<DcpMetadata> parse_dcp_metadata(std::string_view pickle, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(const PickleTree t, read_pickle(pickle), where);
  const Reader r(t, where);
  PTC_RETURN_IF_ERROR(r.check_globals());
  PTC_ASSIGN_OR_RETURN(
      const auto md,
      r.fields(t.root(), kMeta, "Metadata",
               {"state_dict_metadata", "planner_data", "storage_data", "storage_meta", "version"}, "the pickle"));
  if (md.count("storage_meta") && t[md.at("storage_meta")].kind != PickleKind::kNone) {
    PTC_RETURN_IF_ERROR(r.fields(md.at("storage_meta"), kMeta, "StorageMeta",
                                 {"checkpoint_id", "save_id", "load_id", "modules"}, "storage_meta")
                            .status());
  }
  if (md.count("version") && t[md.at("version")].kind != PickleKind::kNone) {
    PTC_RETURN_IF_ERROR(r.str(md.at("version"), "version").status());
  }
  PTC_ASSIGN_OR_RETURN(const PickleId sd_id, r.field(md, "storage_data", "Metadata"));
  PTC_ASSIGN_OR_RETURN(auto storage, storage_data(r, t, sd_id, where));

  DcpMetadata out;
  PTC_ASSIGN_OR_RETURN(const PickleId sdm_id, r.field(md, "state_dict_metadata", "Metadata"));
  const PickleValue& sdm = t[sdm_id];
  if (sdm.kind != PickleKind::kDict) return r.bad("state_dict_metadata is a " + t.describe(sdm_id) + ", not a dict");
  size_t total_chunks = 0;
  for (size_t i = 0; i < sdm.items.size(); i += 2) {
    DcpItem it;
    PTC_ASSIGN_OR_RETURN(it.fqn, r.str(sdm.items[i], "a state_dict_metadata key"));
    if (it.fqn.empty() || it.fqn.find('\0') != std::string::npos) {
      return invalid(where + ": an FQN is empty or holds a NUL byte");
    }
    const std::string what = "'" + it.fqn + "'";
    const PickleId m = sdm.items[i + 1];
    std::vector<std::optional<ptc::Shape>> keys;
    if (t[m].kind == PickleKind::kObject && t.is_global(t[m].callable, kMeta, "BytesStorageMetadata")) {
      PTC_RETURN_IF_ERROR(r.fields(m, kMeta, "BytesStorageMetadata", {}, what, true).status());
      it.bytes = true;
      it.chunks.resize(1);
      keys.emplace_back();
    } else {
      PTC_ASSIGN_OR_RETURN(const auto f,
                           r.fields(m, kMeta, "TensorStorageMetadata", {"properties", "size", "chunks"}, what));
      PTC_ASSIGN_OR_RETURN(const PickleId props, r.field(f, "properties", what));
      PTC_ASSIGN_OR_RETURN(it.dtype, r.dtype(props, what + " properties"));
      PTC_ASSIGN_OR_RETURN(const PickleId size, r.field(f, "size", what));
      PTC_ASSIGN_OR_RETURN(it.size, r.size(size, what + " size"));
      PTC_ASSIGN_OR_RETURN(const PickleId chunks, r.field(f, "chunks", what));
      if (t[chunks].kind != PickleKind::kList) return r.bad(what + " chunks is a " + t.describe(chunks));
      for (PickleId c : t[chunks].items) {
        if (++total_chunks > kMaxDcpChunks) {
          return invalid(where + ": more than " + std::to_string(kMaxDcpChunks) + " chunks");
        }
        PTC_ASSIGN_OR_RETURN(const auto cf,
                             r.fields(c, kMeta, "ChunkStorageMetadata", {"offsets", "sizes"}, what + " chunk"));
        DcpChunk chunk;
        PTC_ASSIGN_OR_RETURN(const PickleId offsets, r.field(cf, "offsets", what + " chunk"));
        PTC_ASSIGN_OR_RETURN(chunk.offsets, r.size(offsets, what + " chunk offsets"));
        PTC_ASSIGN_OR_RETURN(const PickleId sizes, r.field(cf, "sizes", what + " chunk"));
        PTC_ASSIGN_OR_RETURN(chunk.sizes, r.size(sizes, what + " chunk sizes"));
        keys.emplace_back(chunk.offsets);
        it.chunks.push_back(std::move(chunk));
      }
      PTC_RETURN_IF_ERROR(check_tensor(it, where));
    }
    for (size_t k = 0; k < it.chunks.size(); ++k) {
      const auto s = storage.find(StorageKey{it.fqn, keys[k]});
      if (s == storage.end()) {
        return corrupt(where + ": " + (it.bytes ? "bytes item" : "chunk " + shape_of(it.chunks[k]) + " of") + " " +
                       what + " has no storage_data entry");
      }
      it.chunks[k].file = s->second.file;
      it.chunks[k].offset = s->second.offset;
      it.chunks[k].length = s->second.length;
      s->second.used = true;
    }
    out.items.push_back(std::move(it));
  }
  std::sort(out.items.begin(), out.items.end(), [](const DcpItem& a, const DcpItem& b) { return a.fqn < b.fqn; });
  for (size_t i = 1; i < out.items.size(); ++i) {
    if (out.items[i].fqn == out.items[i - 1].fqn) return r.bad("'" + out.items[i].fqn + "' is listed twice");
  }
  for (const auto& [key, ref] : storage) {
    if (!ref.used) {
      return r.bad("storage_data entry of '" + key.first + "'" +
                   (key.second ? " at " + ptc::shape_string(*key.second) : "") + " belongs to no chunk");
    }
  }

  if (md.count("planner_data") && t[md.at("planner_data")].kind != PickleKind::kNone) {
    const PickleValue& pd = t[md.at("planner_data")];
    if (pd.kind != PickleKind::kDict) return r.bad("planner_data is a " + t.describe(md.at("planner_data")));
    for (size_t i = 0; i < pd.items.size(); i += 2) {
      PTC_ASSIGN_OR_RETURN(std::string key, r.str(pd.items[i], "a planner_data key"));
      PTC_ASSIGN_OR_RETURN(auto path, r.key_path(pd.items[i + 1], "planner_data of '" + key + "'"));
      out.planner_data.emplace_back(std::move(key), std::move(path));
    }
    std::sort(out.planner_data.begin(), out.planner_data.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 1; i < out.planner_data.size(); ++i) {
      if (out.planner_data[i].first == out.planner_data[i - 1].first) {
        return r.bad("planner_data lists '" + out.planner_data[i].first + "' twice");
      }
    }
  }
  return out;
}

Status check_dcp_references(const DcpMetadata& md, const std::map<std::string, uint64_t>& file_sizes,
                            const std::string& where) {
  for (const DcpItem& it : md.items) {
    for (const DcpChunk& c : it.chunks) {
      const std::string what =
          it.bytes ? "bytes item '" + it.fqn + "'" : "chunk " + shape_of(c) + " of '" + it.fqn + "'";
      const auto f = file_sizes.find(c.file);
      if (f == file_sizes.end()) return not_found(where + ": " + what + " lies in " + c.file + ", which is missing");
      if (c.offset > f->second || c.length > f->second - c.offset) {
        return error(Code::kOutOfRange, where + ": " + what + " lies at [" + std::to_string(c.offset) + ", +" +
                                            std::to_string(c.length) + ") of " + c.file + ", which holds " +
                                            std::to_string(f->second) + " bytes");
      }
    }
  }
  return Status::ok();
}

}  // namespace ptcfs::formats
