#include "ptc/formats/torch_item.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "ptc/base/endian.h"
#include "ptc/formats/pickle_reader.h"
#include "ptc/formats/torch_archive.h"

namespace ptcfs::formats {
namespace {

constexpr uint32_t kEocdSig = 0x06054b50, kLocatorSig = 0x07064b50, kEocd64Sig = 0x06064b50;
constexpr uint32_t kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;
constexpr uint32_t kMax32 = 0xFFFFFFFFu;
constexpr size_t kMaxDims = 64;

// The legacy typed storages torch.save names for dtypes that have one (_rebuild_tensor_v2).
constexpr std::pair<std::string_view, ptc::DType> kTypedStorages[] = {
    {"DoubleStorage", ptc::DType::F64},    {"FloatStorage", ptc::DType::F32}, {"HalfStorage", ptc::DType::F16},
    {"BFloat16Storage", ptc::DType::BF16}, {"LongStorage", ptc::DType::I64},  {"IntStorage", ptc::DType::I32},
    {"ShortStorage", ptc::DType::I16},     {"CharStorage", ptc::DType::I8},   {"ByteStorage", ptc::DType::U8},
    {"BoolStorage", ptc::DType::BOOL}};

bool typed_storage(const PickleValue& g, ptc::DType& out) {
  if (g.kind != PickleKind::kGlobal || g.text != "torch") return false;
  for (const auto& [name, dt] : kTypedStorages) {
    if (g.name == name) {
      out = dt;
      return true;
    }
  }
  return false;
}

bool allowed_global(const PickleValue& g) {
  ptc::DType dt;
  return (g.text == "torch._utils" && (g.name == "_rebuild_tensor_v2" || g.name == "_rebuild_tensor_v3")) ||
         (g.text == "torch.storage" && g.name == "UntypedStorage") || typed_storage(g, dt) ||
         (g.text == "torch" && dtype_from_torch_name(g.name, dt)) ||
         (g.text == "collections" && g.name == "OrderedDict");
}

// One record of the central directory.
struct Entry {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint64_t csize = 0, usize = 0, local = 0;  // local: its local header's offset
};

class ItemReader {
 public:
  ItemReader(uint64_t length, const ReadAt& read, const std::string& where)
      : len_(length), read_(read), where_(where) {}

  Status bad(const std::string& what) const { return corrupt(where_ + ": " + what); }

  Result<std::string> at(uint64_t off, uint64_t n, const std::string& what) const {
    if (off > len_ || n > len_ - off) {
      return bad(what + " at [" + std::to_string(off) + ", +" + std::to_string(n) + ") runs past the item's " +
                 std::to_string(len_) + " bytes");
    }
    PTC_ASSIGN_OR_RETURN(std::string b, read_(off, n), where_);
    if (b.size() != n) return bad("a read of " + std::to_string(n) + " bytes gave " + std::to_string(b.size()));
    return b;
  }

  // The central directory's records; dir_offset_ is where it begins.
  Result<std::vector<Entry>> directory() {
    if (len_ < 22) return bad("an item of " + std::to_string(len_) + " bytes is too short for a ZIP archive");
    // torch writes no archive comment: the end record is the last 22 bytes. Otherwise look for it
    // in the last 64 KiB (a comment's most).
    uint64_t eocd = len_ - 22;
    PTC_ASSIGN_OR_RETURN(std::string e, at(eocd, 22, "the end of central directory"));
    if (load_le<uint32_t>(e.data()) != kEocdSig || load_le<uint16_t>(e.data() + 20) != 0) {
      const uint64_t n = std::min<uint64_t>(len_, 22 + 0xFFFF);
      PTC_ASSIGN_OR_RETURN(const std::string tail, at(len_ - n, n, "the end of central directory"));
      size_t p = tail.size() - 22 + 1;
      while (p-- > 0) {
        if (load_le<uint32_t>(tail.data() + p) == kEocdSig && p + 22 + load_le<uint16_t>(tail.data() + p + 20) == n) {
          break;
        }
      }
      if (p == static_cast<size_t>(-1)) return bad("no ZIP end of central directory record");
      eocd = len_ - n + p;
      e = tail.substr(p, 22);
    }
    if (load_le<uint16_t>(e.data() + 4) != 0 || load_le<uint16_t>(e.data() + 6) != 0) {
      return bad("a ZIP archive on several disks");
    }
    uint64_t count = load_le<uint16_t>(e.data() + 10), size = load_le<uint32_t>(e.data() + 12),
             offset = load_le<uint32_t>(e.data() + 16), limit = eocd;
    bool z64 = false;
    if (eocd >= 20) {
      PTC_ASSIGN_OR_RETURN(const std::string loc, at(eocd - 20, 20, "the ZIP64 locator"));
      if (load_le<uint32_t>(loc.data()) == kLocatorSig) {
        const uint64_t rec = load_le<uint64_t>(loc.data() + 8);
        if (rec > eocd - 20 || eocd - 20 - rec < 56) return bad("the ZIP64 locator points past its place");
        PTC_ASSIGN_OR_RETURN(const std::string r, at(rec, 56, "the ZIP64 end of central directory"));
        if (load_le<uint32_t>(r.data()) != kEocd64Sig) return bad("no ZIP64 end of central directory record");
        count = load_le<uint64_t>(r.data() + 32);
        size = load_le<uint64_t>(r.data() + 40);
        offset = load_le<uint64_t>(r.data() + 48);
        limit = rec;
        z64 = true;
      }
    }
    if (!z64 && (count == 0xFFFF || size == kMax32 || offset == kMax32))
      return bad("ZIP64 sizes without ZIP64 records");
    if (size > kMaxTorchDirectory) {
      return error(Code::kResourceExhausted, where_ + ": a central directory of " + std::to_string(size) +
                                                 " bytes, more than " + std::to_string(kMaxTorchDirectory));
    }
    if (offset > limit || size > limit - offset) return bad("the central directory runs past its end records");
    if (count > size / 46)
      return bad(std::to_string(count) + " records cannot fit a directory of " + std::to_string(size) + " bytes");
    dir_offset_ = offset;
    PTC_ASSIGN_OR_RETURN(const std::string dir, at(offset, size, "the central directory"));
    std::vector<Entry> out;
    size_t p = 0;
    for (uint64_t i = 0; i < count; ++i) {
      if (dir.size() - p < 46 || load_le<uint32_t>(dir.data() + p) != kCentralSig) {
        return bad("central directory record " + std::to_string(i) + " is malformed");
      }
      const char* h = dir.data() + p;
      Entry en;
      en.flags = load_le<uint16_t>(h + 8);
      en.method = load_le<uint16_t>(h + 10);
      en.csize = load_le<uint32_t>(h + 20);
      en.usize = load_le<uint32_t>(h + 24);
      en.local = load_le<uint32_t>(h + 42);
      const size_t nlen = load_le<uint16_t>(h + 28), xlen = load_le<uint16_t>(h + 30), clen = load_le<uint16_t>(h + 32);
      if (dir.size() - p - 46 < nlen + xlen + clen)
        return bad("central directory record " + std::to_string(i) + " is truncated");
      en.name = dir.substr(p + 46, nlen);
      PTC_RETURN_IF_ERROR(zip64_extra(std::string_view(dir).substr(p + 46 + nlen, xlen), en));
      p += 46 + nlen + xlen + clen;
      out.push_back(std::move(en));
    }
    if (p != dir.size()) return bad("the central directory has bytes after its records");
    return out;
  }

  // Where a stored record's bytes begin, from its local header; they must end before the directory.
  Result<uint64_t> data_start(const Entry& en) const {
    if (en.flags & 1) return invalid(where_ + ": record " + en.name + " is encrypted");
    if (en.method != 0) {
      return invalid(where_ + ": record " + en.name + " is compressed (method " + std::to_string(en.method) +
                     "); only stored records are supported");
    }
    if (en.csize != en.usize) return bad("stored record " + en.name + " has two sizes");
    PTC_ASSIGN_OR_RETURN(const std::string h, at(en.local, 30, "the local header of " + en.name));
    if (load_le<uint32_t>(h.data()) != kLocalSig || load_le<uint16_t>(h.data() + 8) != en.method) {
      return bad("the local header of " + en.name + " is malformed");
    }
    const uint64_t nlen = load_le<uint16_t>(h.data() + 26), xlen = load_le<uint16_t>(h.data() + 28);
    PTC_ASSIGN_OR_RETURN(const std::string name, at(en.local + 30, nlen, "the local header of " + en.name));
    if (name != en.name) return bad("the local header of " + en.name + " names " + name.substr(0, 100));
    const uint64_t start = en.local + 30 + nlen + xlen;
    if (start > dir_offset_ || en.usize > dir_offset_ - start) {
      return bad("record " + en.name + " runs into the central directory");
    }
    return start;
  }

 private:
  // The ZIP64 extended information field: 8-byte values for the sizes and offset whose 4-byte
  // fields are saturated, in that order.
  Status zip64_extra(std::string_view x, Entry& en) const {
    while (x.size() >= 4) {
      const uint16_t id = load_le<uint16_t>(x.data()), n = load_le<uint16_t>(x.data() + 2);
      if (x.size() - 4 < n) return bad("record " + en.name + " has a truncated extra field");
      std::string_view f = x.substr(4, n);
      if (id == 1) {
        for (uint64_t* v : {&en.usize, &en.csize, &en.local}) {
          if (*v != kMax32) continue;
          if (f.size() < 8) return bad("record " + en.name + " has a short ZIP64 field");
          *v = load_le<uint64_t>(f.data());
          f.remove_prefix(8);
        }
      }
      x.remove_prefix(4 + n);
    }
    return Status::ok();
  }

  uint64_t len_;
  const ReadAt& read_;
  const std::string& where_;
  uint64_t dir_offset_ = 0;
};

// a * b, false on overflow.
bool mul(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

struct Rebuild {
  TorchTensorItem t;
  std::string key;             // of the storage record
  uint64_t storage_bytes = 0;  // what the persistent id says
};

// data.pkl: _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
// or _rebuild_tensor_v3(..., hooks, dtype[, metadata]).
Result<Rebuild> interpret(const PickleTree& t, const std::string& where) {
  const auto bad = [&](const std::string& what) { return corrupt(where + ": data.pkl " + what); };
  size_t pids = 0;
  for (PickleId id = 0; id < t.size(); ++id) {
    const PickleValue& v = t[id];
    if (v.kind == PickleKind::kGlobal && !allowed_global(v)) {
      return invalid(where + ": data.pkl names global " + v.text + "." + v.name + ", not allowed in a tensor item");
    }
    pids += v.kind == PickleKind::kPersistentId;
  }
  if (pids != 1) return invalid(where + ": data.pkl holds " + std::to_string(pids) + " storages, not one");
  const PickleValue& root = t[t.root()];
  const bool v3 = root.kind == PickleKind::kObject && t.is_global(root.callable, "torch._utils", "_rebuild_tensor_v3");
  if (root.kind != PickleKind::kObject || root.newobj || root.state != kNoPickleValue ||
      !(v3 || t.is_global(root.callable, "torch._utils", "_rebuild_tensor_v2"))) {
    return invalid(where + ": data.pkl holds a " + t.describe(t.root()) + ", not one tensor");
  }
  const std::vector<PickleId>& a = t[root.args].items;
  const size_t n = v3 ? 7 : 6;
  if (a.size() != n && a.size() != n + 1) return bad("rebuilds with " + std::to_string(a.size()) + " arguments");
  const auto ints = [&](PickleId id, ptc::Shape& out, const char* what) -> Status {
    if (t[id].kind != PickleKind::kTuple) return bad(std::string(what) + " is a " + t.describe(id));
    if (t[id].items.size() > kMaxDims) return bad(std::string(what) + " has more than 64 dims");
    for (PickleId x : t[id].items) {
      if (t[x].kind != PickleKind::kInt || t[x].integer < 0) {
        return bad(std::string(what) + " holds " + t.describe(x) + ", not a non-negative int");
      }
      out.push_back(t[x].integer);
    }
    return Status::ok();
  };

  Rebuild r;
  // The storage: ('storage', class, key, location, numel).
  if (t[a[0]].kind != PickleKind::kPersistentId) return bad("rebuilds from a " + t.describe(a[0]));
  const PickleId pid = t[a[0]].items[0];
  const std::vector<PickleId>& s = t[pid].items;
  if (t[pid].kind != PickleKind::kTuple || s.size() != 5 || t[s[0]].kind != PickleKind::kStr ||
      t[s[0]].text != "storage" || t[s[2]].kind != PickleKind::kStr || t[s[3]].kind != PickleKind::kStr ||
      t[s[4]].kind != PickleKind::kInt || t[s[4]].integer < 0) {
    return bad("has a persistent id that is not ('storage', class, key, location, numel)");
  }
  r.key = t[s[2]].text;
  ptc::DType storage_dtype = ptc::DType::U8;
  const bool typed = typed_storage(t[s[1]], storage_dtype);
  if (!typed && !t.is_global(s[1], "torch.storage", "UntypedStorage"))
    return bad("has a storage of " + t.describe(s[1]));
  if (!mul(static_cast<uint64_t>(t[s[4]].integer), typed ? ptc::dtype_size(storage_dtype) : 1, r.storage_bytes)) {
    return bad("has a storage of more than 2^64 bytes");
  }
  if (v3) {
    const PickleValue& d = t[a[6]];
    if (d.kind != PickleKind::kGlobal || d.text != "torch" || !dtype_from_torch_name(d.name, r.t.dtype)) {
      return bad("has a dtype that is a " + t.describe(a[6]));
    }
    if (typed && storage_dtype != r.t.dtype) return bad("has a dtype other than its storage's");
  } else {
    if (!typed) return bad("rebuilds an untyped storage with _rebuild_tensor_v2");
    r.t.dtype = storage_dtype;
  }

  if (t[a[1]].kind != PickleKind::kInt || t[a[1]].integer < 0) return bad("has a storage offset " + t.describe(a[1]));
  r.t.storage_offset = static_cast<uint64_t>(t[a[1]].integer);
  PTC_RETURN_IF_ERROR(ints(a[2], r.t.shape, "the size"));
  PTC_RETURN_IF_ERROR(ints(a[3], r.t.stride, "the stride"));
  if (r.t.shape.size() != r.t.stride.size()) return bad("has a size and a stride of different ranks");
  if (t[a[4]].kind != PickleKind::kBool) return bad("has requires_grad " + t.describe(a[4]));
  const PickleValue& hooks = t[a[5]];
  if (hooks.kind != PickleKind::kObject || !t.is_global(hooks.callable, "collections", "OrderedDict") ||
      !t[hooks.args].items.empty() || hooks.state != kNoPickleValue || hooks.kwargs != kNoPickleValue) {
    return invalid(where + ": data.pkl has backward hooks " + t.describe(a[5]) + ", not an empty OrderedDict");
  }
  if (a.size() == n + 1 && !(t[a[n]].kind == PickleKind::kDict && t[a[n]].items.empty())) {
    return invalid(where + ": data.pkl has tensor metadata " + t.describe(a[n]) + ", not supported");
  }
  return r;
}

// Elements the tensor spans in its storage from its storage offset; false on overflow.
bool extent(const TorchTensorItem& t, uint64_t& out) {
  out = 0;
  if (std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end()) return true;
  uint64_t last = 0;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    uint64_t step = 0;
    if (!mul(static_cast<uint64_t>(t.shape[d] - 1), static_cast<uint64_t>(t.stride[d]), step) ||
        __builtin_add_overflow(last, step, &last)) {
      return false;
    }
  }
  return !__builtin_add_overflow(last, uint64_t{1}, &out);
}

}  // namespace

bool dtype_from_torch_name(std::string_view name, ptc::DType& out) {
  for (int i = 0; i <= static_cast<int>(ptc::DType::U64); ++i) {
    const auto d = static_cast<ptc::DType>(i);
    if (name == torch_dtype_name(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

Result<TorchTensorItem> read_torch_tensor_item(uint64_t item_length, const ReadAt& read, const std::string& where) {
  ItemReader z(item_length, read, where);
  PTC_ASSIGN_OR_RETURN(std::vector<Entry> entries, z.directory());
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  const Entry* pkl = nullptr;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& name = entries[i].name;
    if (i > 0 && name == entries[i - 1].name) return z.bad("the archive holds " + name.substr(0, 100) + " twice");
    const size_t slash = name.find('/');
    if (slash != std::string::npos && slash > 0 && name.substr(slash) == "/data.pkl") {
      if (pkl) return z.bad("the archive holds two data.pkl");
      pkl = &entries[i];
    }
  }
  if (!pkl) return z.bad("the archive holds no <prefix>/data.pkl");
  const std::string prefix = pkl->name.substr(0, pkl->name.find('/'));
  if (pkl->usize > kMaxTorchDataPkl) {
    return error(Code::kResourceExhausted, where + ": data.pkl of " + std::to_string(pkl->usize) +
                                               " bytes, more than " + std::to_string(kMaxTorchDataPkl));
  }
  PTC_ASSIGN_OR_RETURN(const uint64_t pkl_start, z.data_start(*pkl));
  PTC_ASSIGN_OR_RETURN(const std::string pkl_bytes, z.at(pkl_start, pkl->usize, "data.pkl"));
  PTC_ASSIGN_OR_RETURN(const PickleTree tree, read_pickle(pkl_bytes), where + ": data.pkl");
  PTC_ASSIGN_OR_RETURN(Rebuild r, interpret(tree, where));

  const auto find = [&](const std::string& name) -> const Entry* {
    const auto it = std::lower_bound(entries.begin(), entries.end(), name,
                                     [](const Entry& e, const std::string& n) { return e.name < n; });
    return it == entries.end() || it->name != name ? nullptr : &*it;
  };
  // The storage's bytes are used as they are: they must be little-endian (an archive without a
  // byteorder record is, as torch assumes).
  if (const Entry* order = find(prefix + "/byteorder")) {
    if (order->usize > 16) return z.bad("the byteorder record holds " + std::to_string(order->usize) + " bytes");
    PTC_ASSIGN_OR_RETURN(const uint64_t start, z.data_start(*order));
    PTC_ASSIGN_OR_RETURN(const std::string bo, z.at(start, order->usize, "the byteorder record"));
    if (bo != "little") return invalid(where + ": the tensor is stored " + bo + "-endian, not little-endian");
  }
  const std::string record = prefix + "/data/" + r.key;
  const Entry* it = find(record);
  if (!it) return z.bad("the archive holds no storage record " + record);
  PTC_ASSIGN_OR_RETURN(r.t.data_offset, z.data_start(*it));
  r.t.data_length = it->usize;
  if (r.t.data_length != r.storage_bytes) {
    return z.bad("storage record " + record + " holds " + std::to_string(r.t.data_length) + " bytes, its storage " +
                 std::to_string(r.storage_bytes));
  }
  const size_t item = ptc::dtype_size(r.t.dtype);
  uint64_t numel_bytes = item, span = 0, needed = 0;
  for (int64_t d : r.t.shape) {
    if (!mul(numel_bytes, static_cast<uint64_t>(d), numel_bytes)) numel_bytes = ~uint64_t{0};
  }
  if (numel_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return z.bad("a tensor " + ptc::shape_string(r.t.shape) + " of 2^63 bytes or more");
  }
  if (!extent(r.t, span) || (span > 0 && (__builtin_add_overflow(span, r.t.storage_offset, &needed) ||
                                          !mul(needed, item, needed) || needed > r.t.data_length))) {
    return z.bad("the tensor " + ptc::shape_string(r.t.shape) + " with stride " + ptc::shape_string(r.t.stride) +
                 " from storage offset " + std::to_string(r.t.storage_offset) + " runs past its storage of " +
                 std::to_string(r.t.data_length) + " bytes");
  }
  return r.t;
}

}  // namespace ptcfs::formats
