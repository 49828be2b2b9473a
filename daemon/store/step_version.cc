#include "daemon/store/step_version.h"

#include "daemon/store/read_ahead.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "ptc/base/json_util.h"

namespace ptcfs {

using nlohmann::json;

uint64_t row_bytes(const StoredSlice& s) {
  uint64_t n = 0;
  for (const auto& e : s.extents) n += e.len;
  return n;
}

uint64_t slice_bytes(const StoredSlice& s) { return s.rows * row_bytes(s); }

void for_each_piece(const StoredSlice& s, uint64_t off, uint64_t len,
                    const std::function<void(uint64_t, uint64_t, uint64_t)>& fn) {
  const uint64_t rb = row_bytes(s);
  if (rb == 0) return;
  uint64_t row = off / rb, in = off % rb;
  while (len > 0 && row < s.rows) {
    uint64_t pos = 0;
    for (const Extent& e : s.extents) {
      if (len == 0) break;
      if (in < pos + e.len) {
        const uint64_t skip = in - pos, n = std::min(len, e.len - skip);
        fn(e.blob, e.blob == kZeroBlob ? 0 : e.offset + row * e.stride + skip, n);
        in += n;
        len -= n;
      }
      pos += e.len;
    }
    ++row;
    in = 0;
  }
}

StepVersion::StepVersion(std::string job, std::string step, uint64_t version, int64_t created, ptc::Layout layout,
                         std::vector<std::vector<StoredSlice>> stored, BlobStore* blobs, StepPlacement placement,
                         const RemoteSlices* remote)
    : job_(std::move(job)),
      step_(std::move(step)),
      version_(version),
      created_(created),
      layout_(std::move(layout)),
      stored_(std::move(stored)),
      blobs_(blobs),
      placement_(std::move(placement)),
      remote_(remote) {
  static std::atomic<uint64_t> next_serial{1};
  serial_ = next_serial.fetch_add(1, std::memory_order_relaxed);
}

size_t StepVersion::shard_index(const ptc::ShardId& s) const {
  return static_cast<size_t>(s.p) * layout_.parallelism().tp + s.t;
}

const StoredSlice& StepVersion::stored(const ptc::ShardId& shard, size_t slice) const {
  return stored_[shard_index(shard)][slice];
}

namespace {

// The blobs walk_slice has opened: a slice's extents name a few, and the pieces of one row
// alternate between them.
class OpenedBlobs {
 public:
  explicit OpenedBlobs(const OpenBlob& open) : open_(open) {}
  Result<std::shared_ptr<const BlobFile>> get(uint64_t id) {
    for (const auto& f : files_)
      if (f->id() == id) return f;
    PTC_ASSIGN_OR_RETURN(auto f, open_(id));
    files_.push_back(f);
    return f;
  }

 private:
  const OpenBlob& open_;
  std::vector<std::shared_ptr<const BlobFile>> files_;
};

Status walk_pieces(const StoredSlice& slice, uint64_t off, uint64_t len, OpenedBlobs& blobs, PieceSink& sink) {
  Status st;
  for_each_piece(slice, off, len, [&](uint64_t blob, uint64_t boff, uint64_t n) {
    if (!st) return;
    if (blob == kZeroBlob) {
      st = sink.zeros(n);
      return;
    }
    auto file = blobs.get(blob);
    st = file ? sink.blob(*file, boff, n) : file.status();
  });
  return st;
}

}  // namespace

Status walk_slice(const StoredSlice& slice, uint64_t off, uint64_t len, const OpenBlob& open, PieceSink& sink) {
  OpenedBlobs blobs(open);
  const uint64_t rb = row_bytes(slice);
  if (!sink.takes_rows() || rb == 0 || len < rb) return walk_pieces(slice, off, len, blobs, sink);
  // A partial first row, the whole rows, a partial last row.
  if (const uint64_t in = off % rb; in != 0) {
    const uint64_t n = std::min(len, rb - in);
    PTC_RETURN_IF_ERROR(walk_pieces(slice, off, n, blobs, sink));
    off += n;
    len -= n;
  }
  if (const uint64_t rows = len / rb; rows > 0) {
    const uint64_t row = off / rb;
    std::vector<PieceSink::RowPiece> pieces;
    pieces.reserve(slice.extents.size());
    for (const Extent& e : slice.extents) {
      if (e.len == 0) continue;
      PieceSink::RowPiece p{nullptr, 0, e.len, 0};
      if (e.blob != kZeroBlob) {
        PTC_ASSIGN_OR_RETURN(p.file, blobs.get(e.blob));
        p.off = e.offset + row * e.stride;
        p.stride = e.stride;
      }
      pieces.push_back(std::move(p));
    }
    PTC_ASSIGN_OR_RETURN(const bool taken, sink.rows(rows, pieces));
    if (!taken) PTC_RETURN_IF_ERROR(walk_pieces(slice, off, rows * rb, blobs, sink));
    off += rows * rb;
    len -= rows * rb;
  }
  return len > 0 ? walk_pieces(slice, off, len, blobs, sink) : Status::ok();
}

void StepVersion::touch() const {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (last_read_.load(std::memory_order_relaxed) != now) last_read_.store(now, std::memory_order_relaxed);
}

Status StepVersion::pieces(const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len, PieceSink& sink) const {
  touch();
  const StoredSlice& ss = stored(shard, slice);
  if (off + len > slice_bytes(ss)) return internal("read past the end of a stored slice");
  const Status s = walk_slice(
      ss, off, len, [this](uint64_t id) { return blobs_->file(id); }, sink);
  touch();  // again after a blob's fetch back, which may take longer than the budget's idle time
  return s;
}

namespace {

// A read reply's pieces: memory of mapped blobs (the kernel copies it straight into its page
// cache, fs/reply.h, with no read into a buffer first), a file range for a blob that cannot
// be mapped, zeros for padding.
class ReplySink final : public ReadBufferSink {
 public:
  ReplySink(const BlobStore& blobs, fs::ReadBuffer& out) : ReadBufferSink(out), blobs_(blobs) {}
  Status blob(const std::shared_ptr<const BlobFile>& file, uint64_t off, uint64_t n) override {
    fs::ReadBuffer& buf = out(file);
    // A blob cut short behind our back: say so, rather than reply with fewer bytes (which
    // the kernel would take for the end of the file) or touch its mapping past the end.
    if (off + n > file->size())
      return corrupt("blob " + blobs_.path(file->id()) + " is shorter than its metadata says (" +
                     std::to_string(file->size()) + " bytes, a piece ends at " + std::to_string(off + n) + ")");
    if (const std::byte* map = file->data()) {
      buf.add_mapped(map + off, n, file->fd(), off);
      ahead_.add(file->fd(), off, n);
    } else
      buf.add_fd(file->fd(), off, n);
    return Status::ok();
  }
  // Rows go to a buffer that takes them (the direct server's) as one segment; rows with a
  // blob unmapped, or cut short, are left to walk_slice: piece by piece, blob() says which.
  bool takes_rows() const override { return buffer().takes_rows(); }
  Result<bool> rows(uint64_t rows, const std::vector<RowPiece>& pieces) override {
    std::vector<fs::ReadBuffer::RowPiece> kept;
    kept.reserve(pieces.size());
    for (const RowPiece& p : pieces) {
      if (!p.file) {
        kept.push_back(fs::ReadBuffer::RowPiece{nullptr, -1, 0, p.len, 0});
        continue;
      }
      const uint64_t end = p.off + (rows - 1) * p.stride + p.len;  // of the last row's piece
      const std::byte* map = p.file->data();
      if (!map || end > p.file->size()) return false;
      out(p.file);  // kept alive with the buffer
      kept.push_back(fs::ReadBuffer::RowPiece{map + p.off, p.file->fd(), p.off, p.len, p.stride});
    }
    buffer().add_rows(rows, kept);
    return true;
  }

 private:
  const BlobStore& blobs_;
  // The pages of the mapped pieces, asked ahead before the reply copies them (the sink goes
  // before the reply is sent).
  ReadAhead ahead_;
};

}  // namespace

Status StepVersion::read_slice(const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
                               fs::ReadBuffer& out) const {
  if (!holds(shard)) {
    if (!remote_) return error(Code::kUnavailable, "shard " + shard.name() + " is not held on this node");
    return remote_->read(*this, shard, slice, off, len, out);
  }
  ReplySink sink(*blobs_, out);
  return pieces(shard, slice, off, len, sink);
}

uint64_t StepVersion::total_bytes() const {
  uint64_t n = 0;
  for (const auto& shard : stored_)
    for (const auto& s : shard) n += slice_bytes(s);
  return n;
}

std::vector<uint64_t> StepVersion::blobs_used() const {
  std::set<uint64_t> ids;
  for (const auto& shard : stored_)
    for (const auto& s : shard)
      for (const auto& e : s.extents)
        if (e.blob != kZeroBlob) ids.insert(e.blob);
  return {ids.begin(), ids.end()};
}

std::string StepVersion::meta_key(const std::string& job, const std::string& step) {
  return std::string(kStepPrefix) + job + "/" + step;
}

namespace {
std::string slices_key(const std::string& job, const std::string& step, uint64_t version, const std::string& shard) {
  char v[24];
  std::snprintf(v, sizeof v, "%020" PRIu64, version);
  return "slices/" + job + "/" + step + "/" + v + "/" + shard;
}
}  // namespace

void StepVersion::to_records(WriteBatch& batch) const {
  const auto& shards = layout_.shards();
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!placement_.holds(i)) continue;
    // The record's JSON written as text, in the layout's order: a shard of 50,000 tensors made
    // a map of 50,000 JSON objects first (a tenth of a 100,000-tensor repartition).
    const auto& slices = layout_.slices(shards[i]);
    // One allocation of a record of megabytes, not a doubling: a slice takes its name and about 80
    // bytes more (one extent of three numbers, a checksum of up to 20 digits).
    size_t size = 64;
    for (const auto& sl : slices) size += layout_.tensor(sl).name.size() + 96;
    std::string rec;
    rec.reserve(size);
    rec += '{';
    for (size_t j = 0; j < slices.size(); ++j) {
      const StoredSlice& ss = stored_[i][j];
      if (j > 0) rec += ',';
      append_json_string(rec, layout_.tensor(slices[j]).name);
      rec += ":{\"x\":[";
      for (size_t k = 0; k < ss.extents.size(); ++k) {
        const Extent& e = ss.extents[k];
        rec += k > 0 ? ",[" : "[";
        append_json_u64(rec, e.blob);
        rec += ',';
        append_json_u64(rec, e.offset);
        rec += ',';
        append_json_u64(rec, e.len);
        if (ss.rows > 1) {
          rec += ',';
          append_json_u64(rec, e.stride);
        }
        rec += ']';
      }
      rec += ']';
      if (ss.rows > 1) {
        rec += ",\"r\":";
        append_json_u64(rec, ss.rows);
      }
      if (ss.xxh3) {
        rec += ",\"h\":";
        append_json_u64(rec, *ss.xxh3);
      }
      rec += '}';
    }
    rec += '}';
    batch.put(slices_key(job_, step_, version_, shards[i].name()), rec);
  }
  json step = {{"version", version_}, {"created", created_}};
  if (!origin_.empty()) step["origin"] = origin_;
  if (!placement_.nodes.empty()) {
    step["nodes"] = placement_.nodes;
    if (!placement_.gpus.empty()) step["gpus"] = placement_.gpus;
    json held = json::array();
    for (size_t i = 0; i < shards.size(); ++i)
      if (placement_.holds(i)) held.push_back(shards[i].name());
    step["held"] = std::move(held);
    if (!placement_.holders.empty()) {
      json holders = json::object();
      for (size_t i = 0; i < shards.size(); ++i) holders[shards[i].name()] = placement_.holders[i];
      step["holders"] = std::move(holders);
    }
  }
  // The PTC spliced in as text (ptc_json_text): as a DOM it was a tenth of a 100,000-tensor change.
  std::string text = step.dump();
  text.pop_back();  // its '}'
  text += ",\"ptc\":";
  text += ptc::ptc_json_text(layout_.ptc());
  text += '}';
  batch.put(meta_key(job_, step_), text);
}

void StepVersion::delete_slice_records(WriteBatch& batch) const {
  const auto& shards = layout_.shards();
  for (size_t i = 0; i < shards.size(); ++i)
    if (placement_.holds(i)) batch.del(slices_key(job_, step_, version_, shards[i].name()));
}

Result<std::shared_ptr<StepVersion>> StepVersion::load(KvStore& kv, const std::string& job, const std::string& step,
                                                       std::string_view step_record, BlobStore* blobs,
                                                       const RemoteSlices* remote) {
  const std::string where = "metadata of " + job + "/" + step;
  try {
    PTC_ASSIGN_OR_RETURN(json rec, parse_json(step_record, where));
    if (!rec.is_object() || !rec.contains("version") || !rec.contains("ptc"))
      return corrupt(where + ": malformed step record");
    PTC_ASSIGN_OR_RETURN(int64_t version, get_int(rec["version"], where + ": version", 0));
    PTC_ASSIGN_OR_RETURN(int64_t created, get_int(rec.value("created", json(0)), where + ": created"));
    PTC_ASSIGN_OR_RETURN(ptc::Ptc ptc, ptc::parse_ptc_json(rec["ptc"].dump(), where));
    PTC_ASSIGN_OR_RETURN(ptc::Layout layout, ptc::Layout::make(ptc, ptc.parallelism));
    StepPlacement placement;
    if (rec.contains("nodes")) {
      for (const auto& n : rec.at("nodes")) placement.nodes.push_back(n.get<std::string>());
      auto gpus = member_gpus_or_empty(rec, "gpus", where);
      if (!gpus || (!gpus->empty() && gpus->size() != placement.nodes.size()))
        return corrupt(where + ": malformed GPU counts of the placement");
      placement.gpus = std::move(gpus).value();
      placement.held.assign(layout.shards().size(), false);
      for (const auto& h : rec.at("held")) {
        const auto id = ptc::parse_shard_name(h.get<std::string>());
        const auto& sh = layout.shards();
        const auto it = id ? std::find(sh.begin(), sh.end(), *id) : sh.end();
        if (it == sh.end()) return corrupt(where + ": holds unknown shard " + h.dump());
        placement.held[static_cast<size_t>(it - sh.begin())] = true;
      }
      if (rec.contains("holders")) {
        const json& hs = rec.at("holders");
        if (!hs.is_object()) return corrupt(where + ": malformed holders");
        for (const auto& sh : layout.shards()) {
          auto ids = member_strings(hs, sh.name().c_str(), where + ": holders");
          if (!ids) return corrupt(ids.status().message());
          placement.holders.push_back(std::move(ids).value());
        }
      }
    }
    std::vector<std::vector<StoredSlice>> stored;
    for (size_t si = 0; si < layout.shards().size(); ++si) {
      const auto& shard = layout.shards()[si];
      if (!placement.holds(si)) {
        stored.emplace_back();
        continue;
      }
      const std::string key = slices_key(job, step, static_cast<uint64_t>(version), shard.name());
      PTC_ASSIGN_OR_RETURN(auto value, kv.get(key));
      if (!value) return corrupt(where + ": missing record " + key);
      PTC_ASSIGN_OR_RETURN(json sj, parse_json(*value, key));
      const auto& slices = layout.slices(shard);
      if (!sj.is_object() || sj.size() != slices.size()) return corrupt(key + ": wrong number of slices");
      std::vector<StoredSlice> ss;
      for (const auto& sl : slices) {
        const std::string& name = layout.tensor(sl).name;
        if (!sj.contains(name)) return corrupt(key + ": no slice for tensor '" + name + "'");
        const json& o = sj[name];
        StoredSlice s;
        if (o.contains("h")) s.xxh3 = o.at("h").get<uint64_t>();
        uint64_t total = 0;
        for (const auto& e : o.at("x")) {
          s.extents.push_back(Extent{e.at(0).get<uint64_t>(), e.at(1).get<uint64_t>(), e.at(2).get<uint64_t>(),
                                     e.size() > 3 ? e.at(3).get<uint64_t>() : 0});
        }
        if (o.contains("r")) s.rows = o.at("r").get<uint64_t>();
        total = slice_bytes(s);
        if (total != layout.bytes(sl)) return corrupt(key + ": extents of '" + name + "' do not add up");
        ss.push_back(std::move(s));
      }
      stored.push_back(std::move(ss));
    }
    auto v = std::make_shared<StepVersion>(job, step, static_cast<uint64_t>(version), created, std::move(layout),
                                           std::move(stored), blobs, std::move(placement), remote);
    if (rec.contains("origin")) {
      if (!rec.at("origin").is_string()) return corrupt(where + ": malformed origin");
      v->set_origin(rec.at("origin").get<std::string>());
    }
    return v;
  } catch (const json::exception& e) {
    return corrupt(where + ": malformed slice record: " + e.what());
  }
}

}  // namespace ptcfs
