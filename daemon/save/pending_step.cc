#include "daemon/save/pending_step.h"

#include <algorithm>
#include <chrono>

#include "daemon/reshard/rank_file.h"
#include "ptc/base/log.h"
#include "ptc/model.h"

namespace ptcfs {

namespace {

constexpr uint64_t kMaxPtcJson = 64 << 20;
// What the drafts of ptc.json of one step may hold together (every rank writes one at once; a
// draft is sized by its furthest write, so one byte at 64 MiB takes 64 MiB).
constexpr uint64_t kMaxDraftBytes = 256 << 20;
// A tensor file's bytes stay in memory until its header is known, up to this end; a write past
// it first gives the file a blob of its own.
constexpr uint64_t kKeepAtMost = 1 << 20;
// Tensor files of at most this size share their shard's pack; larger ones get a blob each.
constexpr uint64_t kPackAtMost = 4 << 20;
// Where a file's region of a pack starts (a multiple of this).
constexpr uint64_t kPackAlign = 64;
// How long an open waits for the release of a whole file its writer has closed (the kernel
// sends it after close() returns; milliseconds, unless the mount is swamped).
constexpr auto kReleaseWait = std::chrono::seconds(2);

std::string range_text(uint64_t lo, uint64_t hi) { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")"; }

// EBUSY at the mount: a whole file that another writer holds.
Status busy(const std::string& why) { return error(Code::kFailedPrecondition, why); }

// Brings a file's part of its step's tally up to date when it goes out of scope: declared
// right after taking the step's lock in every method that changes the file.
class Noted {
 public:
  Noted(PendingStep& s, PendingFile& f) : s_(s), f_(f) {}
  // Destroyed before the lock it was declared after is released (the analysis cannot see that).
  ~Noted() PTC_NO_THREAD_SAFETY_ANALYSIS { s_.note(f_); }
  Noted(const Noted&) = delete;
  Noted& operator=(const Noted&) = delete;

 private:
  PendingStep& s_;
  PendingFile& f_;
};

}  // namespace

PendingFile::PendingFile(std::shared_ptr<PendingStep> step, Kind kind, std::string rel, ptc::ShardId shard,
                         std::string tensor, std::shared_ptr<BlobWriter> blob)
    : kind(kind),
      rel(std::move(rel)),
      shard(shard),
      tensor(std::move(tensor)),
      gate(kind == Kind::kShard),
      place{.text = {}, .blob = std::move(blob), .base = 0},
      step_(std::move(step)) {}

uint64_t PendingFile::size() const {
  MutexLock lock(step_->mu);
  return end;
}

Result<uint64_t> PendingFile::open_writer() {
  MutexLock lock(step_->mu);
  Noted noted(*step_, *this);
  PTC_ASSIGN_OR_RETURN(const uint64_t writer,
                       gate.open(lock, step_->released, kReleaseWait,
                                 step_->name() + "/" + rel +
                                     " is open for writing by another writer (ptc.json and a shard file are written "
                                     "whole, by one writer at a time)"));
  if (kind == Kind::kPtcJson) drafts[writer];
  return writer;
}

bool PendingFile::committing() const {
  MutexLock lock(step_->mu);
  return step_->committing;
}

bool PendingFile::complete() const {
  if (dead || gate.writers() > 0 || !check.error.empty()) return false;
  if (kind == Kind::kPtcJson) return true;
  return check.expected && end == *check.expected && written.covers(0, *check.expected);
}

uint64_t PendingFile::data_written() const {
  if (kind == Kind::kPtcJson) return 0;
  const uint64_t start = kind == Kind::kShard ? check.header.data_start : check.npy.data_start;
  return check.expected ? written.covered(start, *check.expected) : 0;
}

Status PendingFile::write(uint64_t writer, uint64_t off, const void* data, size_t len) {
  const std::string where = step_->name() + "/" + rel;
  std::shared_ptr<BlobWriter> to;
  uint64_t at = 0, resets_before = 0;
  {
    MutexLock lock(step_->mu);
    Noted noted(*step_, *this);
    if (dead) return not_found(where + " was removed");
    if (step_->committing) return ptcfs::error(Code::kPermissionDenied, where + ": its step is committing");
    bool reopened = false;
    PTC_RETURN_IF_ERROR(gate.write(writer, where, reopened));
    if (reopened) {
      // Written after a close: only a copy of the descriptor was closed (a child's, at its
      // exit or exec). What that close found is void: the file is checked at the next.
      if (check.error_at_close) check.error.clear();
      check.error_at_close = false;
      if (kind == Kind::kShard) {
        check.expected.reset();
        check.entry_of_slice.clear();
      }
    }
    if (kind == Kind::kPtcJson) return write_draft(writer, off, data, len, where);
    if (!check.error.empty()) return invalid(check.error);
    if (check.expected && off + len > *check.expected)
      return invalid(where + ": a write of " + range_text(off, off + len) + " goes past the end of the file, " +
                     std::to_string(*check.expected) + " bytes as its header says");
    if (!place.blob) {  // a tensor file kept in memory
      if (!check.expected && off + len <= kKeepAtMost) {
        place.keep(off, data, len);
        written.add(off, off + len);
        end = std::max<uint64_t>(end, off + len);
        return take_header(where);
      }
      PTC_RETURN_IF_ERROR(place_bytes(where));
    }
    to = place.blob;
    at = place.base + off;
    resets_before = resets;
  }
  // The bytes go to the blob outside the lock: writers of disjoint ranges run at once.
  PTC_RETURN_IF_ERROR(to->write_at(at, data, len), where);
  MutexLock lock(step_->mu);
  Noted noted(*step_, *this);
  if (dead) return not_found(where + " was removed");
  if (resets != resets_before)  // the bytes went where the file was before it was cut to 0
    return busy(where + " was truncated while this write was under way; write it again");
  written.add(off, off + len);
  end = std::max<uint64_t>(end, off + len);
  return kind == Kind::kTensor ? take_header(where) : Status::ok();
}

Status PendingFile::write_draft(uint64_t writer, uint64_t off, const void* data, size_t len, const std::string& where) {
  auto it = drafts.find(writer);
  if (it == drafts.end()) return busy(where + ": written through a handle that is not open for writing");
  if (off + len > kMaxPtcJson) return invalid(where + ": larger than " + std::to_string(kMaxPtcJson) + " bytes");
  Draft& d = it->second;
  if (d.text.size() < off + len) {
    const uint64_t grow = off + len - d.text.size();
    if (step_->draft_bytes + grow > kMaxDraftBytes)
      return ptcfs::error(Code::kResourceExhausted, where +
                                                        ": the copies of ptc.json open at once would hold more than " +
                                                        std::to_string(kMaxDraftBytes) + " bytes");
    step_->draft_bytes += grow;
    d.text.resize(off + len);
  }
  std::copy_n(static_cast<const char*>(data), len, d.text.begin() + static_cast<std::ptrdiff_t>(off));
  d.written.add(off, off + len);
  return Status::ok();
}

Status PendingFile::close_draft(uint64_t writer, const std::string& where) {
  auto it = drafts.find(writer);
  // Opened for writing and closed without a write (or a second close of the handle): nothing to check.
  if (it == drafts.end() || it->second.text.empty()) return Status::ok();
  if (!it->second.written.covers(0, it->second.text.size()))
    return invalid(where + ": closed with bytes never written");
  return step_->take_ptc(*this, it->second.text);
}

Status PendingFile::take_header(const std::string& where) {
  if (!check.expected) {
    // The npy header is short: parse it as soon as its bytes are there.
    const uint64_t have = std::min<uint64_t>(written.prefix(), 1 << 20);
    if (have < 10) return Status::ok();
    PTC_ASSIGN_OR_RETURN(const std::string prefix, place.prefix(have));
    auto h = formats::parse_npy_header(prefix, where);
    if (!h) {
      if (h.status().message().find("truncated") != std::string::npos) return Status::ok();
      return invalid(check.error = h.status().message());  // not an npy header, however long
    }
    check.npy = *h;
    check.expected = h->data_start + h->data_bytes;
    PTC_RETURN_IF_ERROR(step_->check(*this));
    if (end > *check.expected)
      return invalid(check.error = where + ": holds " + std::to_string(end) + " bytes, its header says " +
                                   std::to_string(*check.expected));
  }
  return place.blob ? Status::ok() : place_bytes(where);
}

Status PendingFile::place_bytes(const std::string& where) {
  if (check.expected && *check.expected <= kPackAtMost) {
    PendingStep::Pack& pack = step_->packs[shard];
    if (!pack.blob) {
      PTC_ASSIGN_OR_RETURN(BlobWriter w, step_->blobs->create(), where);
      pack.blob = std::make_shared<BlobWriter>(std::move(w));
    }
    const uint64_t at = (pack.next + kPackAlign - 1) / kPackAlign * kPackAlign;
    PTC_RETURN_IF_ERROR(place.move_to(pack.blob, at, *check.expected), where);
    pack.next = at + *check.expected;
    return Status::ok();
  }
  PTC_ASSIGN_OR_RETURN(BlobWriter w, step_->blobs->create(), where);
  PTC_RETURN_IF_ERROR(place.move_to(std::make_shared<BlobWriter>(std::move(w)), 0, place.text.size()), where);
  return Status::ok();
}

Status PendingFile::truncate(uint64_t writer, uint64_t size) {
  MutexLock lock(step_->mu);
  Noted noted(*step_, *this);
  const std::string where = step_->name() + "/" + rel;
  if (dead) return not_found(where + " was removed");
  if (kind == Kind::kPtcJson) {
    // A handle cuts its own draft (open with O_TRUNC); truncate(2) by path changes no one's.
    auto it = drafts.find(writer);
    if (it == drafts.end())
      return ptcfs::error(Code::kPermissionDenied,
                          where + ": written through a handle (open it with O_TRUNC to start a copy again)");
    Draft& d = it->second;
    if (size < d.text.size()) {
      if (size != 0)
        return ptcfs::error(Code::kPermissionDenied, where + ": cannot cut written bytes off a file being saved");
      step_->draft_bytes -= d.text.size();
      d = Draft{};
    }
    return Status::ok();
  }
  // Only its writer changes a whole file; truncate(2) by path only while nobody has it open.
  PTC_RETURN_IF_ERROR(gate.truncate(writer, where));
  if (size < written.end()) {
    if (size != 0)
      return ptcfs::error(Code::kPermissionDenied, where + ": cannot cut written bytes off a file being saved");
    // Start again (open with O_TRUNC over a file written before). A tensor file is kept in
    // memory again until its new header says where it goes (its old region of a pack is left).
    written.clear();
    check.forget();
    end = 0;
    ++resets;
    if (kind == Kind::kTensor)
      place.forget();
    else
      place.text.clear();
    return Status::ok();
  }
  if (check.expected && size > *check.expected)
    return invalid(where + ": " + std::to_string(size) + " bytes is past its end, " + std::to_string(*check.expected));
  end = std::max(end, size);
  return Status::ok();
}

Status PendingFile::flush(uint64_t writer) {
  MutexLock lock(step_->mu);
  Noted noted(*step_, *this);
  const std::string where = step_->name() + "/" + rel;
  if (dead) return Status::ok();
  // A whole file is checked when its writer closes it; its release follows (open_writer).
  gate.closed(writer);
  if (kind == Kind::kPtcJson) return close_draft(writer, where);
  if (!check.error.empty()) return invalid(check.error);
  if (kind == Kind::kTensor) return Status::ok();  // its header was checked as it came
  const Status s = check_closed(where);
  check.error_at_close = !check.error.empty();
  return s;
}

Status PendingFile::check_closed(const std::string& where) {
  // A shard file, written front to back: closed, it must be whole.
  if (!written.covers(0, end)) {
    check.error = where + ": closed with bytes never written (a shard file is written front to back by one writer)";
    return invalid(check.error);
  }
  BlobWriter* const blob = place.blob.get();
  const uint64_t base = place.base;
  auto h = formats::read_safetensors_header(
      end, [&](uint64_t off, void* buf, size_t len) { return blob->read_at(base + off, buf, len); }, where);
  if (!h && h.status().code() != Code::kCorrupt) return h.status();  // the blob could not be read
  if (!h) return invalid(check.error = h.status().message());
  check.header = std::move(h).value();
  check.expected = end;
  return step_->check(*this);
}

void PendingFile::release(uint64_t writer) {
  std::shared_ptr<PendingStep> step;
  {
    MutexLock lock(step_->mu);
    Noted noted(*step_, *this);
    const bool last = gate.release(writer, step_->released);
    if (auto it = drafts.find(writer); it != drafts.end()) {
      step_->draft_bytes -= it->second.text.size();
      drafts.erase(it);
    }
    if (!last || dead) return;
    step = step_;
  }
  if (step->on_closed) step->on_closed(step);
}

Status PendingStep::check(PendingFile& f) {
  mine(*this, f);
  if (!layout || f.kind == PendingFile::Kind::kPtcJson) return Status::ok();
  const std::string where = name() + "/" + f.rel;
  const auto& shards = layout->shards();
  if (std::find(shards.begin(), shards.end(), f.shard) == shards.end()) {
    f.check.error = where + ": " + layout->parallelism().to_string() + " has no shard " + f.shard.name();
    return invalid(f.check.error);
  }
  if (f.kind == PendingFile::Kind::kShard) {
    if (!f.check.expected) return Status::ok();
    auto m = formats::match_rank_header(*layout, f.shard, f.check.header, where);
    if (!m) return invalid(f.check.error = m.status().message());
    f.check.entry_of_slice = std::move(m).value();
    return Status::ok();
  }
  const ptc::TensorSpec* spec = layout->ptc().find(f.tensor);
  if (!spec) return invalid(f.check.error = where + ": tensor '" + f.tensor + "' is not in ptc.json");
  const int j = layout->find_slice(f.shard, static_cast<size_t>(spec - layout->ptc().tensors.data()));
  if (j < 0)
    return invalid(f.check.error = where + ": tensor '" + f.tensor + "' does not belong to shard " + f.shard.name() +
                                   " (wrong pipeline stage)");
  if (!f.check.expected) return Status::ok();
  const ptc::Slice& sl = layout->slices(f.shard)[static_cast<size_t>(j)];
  if (f.check.npy.descr != ptc::dtype_npy_descr(spec->dtype))
    return invalid(f.check.error = where + ": tensor '" + f.tensor + "' is stored as " + f.check.npy.descr +
                                   " but ptc.json says " + ptc::dtype_name(spec->dtype) + " (" +
                                   ptc::dtype_npy_descr(spec->dtype) + ")");
  if (f.check.npy.shape != sl.local_shape)
    return invalid(f.check.error = where + ": tensor '" + f.tensor + "' has shape " +
                                   ptc::shape_string(f.check.npy.shape) + " but shard " + f.shard.name() + " of " +
                                   layout->parallelism().to_string() + " holds a slice of shape " +
                                   ptc::shape_string(sl.local_shape));
  return Status::ok();
}

Status PendingStep::take_ptc(PendingFile& f, const std::string& text) {
  mine(*this, f);
  const std::string where = name() + "/ptc.json";
  // A draft that is not a valid ptc.json, or that differs from the one taken, fails its own close
  // and leaves the file as it was: every writer of a job writes the same ptc.json, so a different
  // one is a writer's mistake, not the step's.
  auto p = ptc::parse_ptc_json(text, where);
  if (!p) return invalid(p.status().message());
  if (auto s = ptc::validate_tensor_names(p->tensors); !s) return invalid(s.with_context(where).message());
  auto l = ptc::Layout::make(*p, p->parallelism);
  if (!l) return invalid(l.status().with_context(where).message());
  if (layout) {
    if (ptc::ptc_to_json(*p) != ptc::ptc_to_json(layout->ptc()))
      return invalid(where +
                     ": differs from the ptc.json this step was written with (another writer's, or "
                     "an earlier one; every writer must write the same)");
    return Status::ok();
  }
  layout = std::move(l).value();
  ptc_text = text;
  f.place.text = text;
  f.end = text.size();
  f.written.clear();
  f.written.add(0, f.end);
  // Every file written so far, against it: the first contradiction fails this close too.
  Status first;
  for (auto& [rel, g] : files) {
    mine(*this, *g);
    if (g.get() == &f || g->dead) continue;
    if (auto s = check(*g); !s && first.is_ok()) first = s;
  }
  recount();
  return first;
}

std::vector<bool> PendingStep::complete_shards() const {
  std::vector<bool> out;
  if (!layout) return out;
  for (const auto& shard : layout->shards()) {
    bool whole = false;
    if (auto it = files.find(shard.name() + ".safetensors"); it != files.end()) {
      const PendingFile& f = *it->second;
      mine(*this, f);
      whole = f.complete() && f.check.entry_of_slice.size() == layout->slices(shard).size();
    } else {
      whole = true;
      for (const auto& sl : layout->slices(shard)) {
        auto t = files.find(shard.name() + "/" + layout->tensor(sl).name + ".npy");
        if (t == files.end()) {
          whole = false;
          break;
        }
        const PendingFile& f = *t->second;
        mine(*this, f);
        whole = whole && f.complete();
      }
      // A shard holding no tensor is written by nobody: it is complete wherever ptc.json is.
    }
    out.push_back(whole);
  }
  return out;
}

bool PendingStep::part_complete_scan() const {
  if (!layout || removed || committing || !failure.empty()) return false;
  if (!ptc_complete()) return false;
  for (const auto& [rel, f] : files) {
    mine(*this, *f);
    if (f->gate.writers() > 0 || !f->check.error.empty()) return false;
  }
  // Every data file belongs to a shard written in full here.
  const std::vector<bool> whole = complete_shards();
  for (const auto& [rel, f] : files) {
    if (f->kind == PendingFile::Kind::kPtcJson) continue;
    const auto& sh = layout->shards();
    const size_t i = static_cast<size_t>(std::find(sh.begin(), sh.end(), f->shard) - sh.begin());
    if (i >= sh.size() || !whole[i]) return false;
  }
  return true;
}

bool PendingStep::complete_scan() const {
  if (!part_complete_scan()) return false;
  const std::vector<bool> whole = complete_shards();
  return std::all_of(whole.begin(), whole.end(), [](bool b) { return b; });
}

// ---- the tally ---------------------------------------------------------------------------

FileCount PendingStep::count_of(const PendingFile& f) const {
  mine(*this, f);
  FileCount c;
  if (f.dead) return c;  // not one of the step's files any more
  c.open = f.gate.writers() > 0;
  c.failed = !f.check.error.empty();
  if (!layout || f.kind == PendingFile::Kind::kPtcJson) return c;
  const auto& shards = layout->shards();
  const auto it = std::find(shards.begin(), shards.end(), f.shard);
  if (it == shards.end()) {
    c.unplaced = true;
    return c;
  }
  c.shard = static_cast<int>(it - shards.begin());
  const size_t slices = layout->slices(f.shard).size();
  if (f.kind == PendingFile::Kind::kShard) {
    const bool full = f.complete() && f.check.entry_of_slice.size() == slices;
    c.done = full ? slices : 0;
    c.short_of = !full;
    return c;
  }
  const ptc::TensorSpec* spec = layout->ptc().find(f.tensor);
  const bool full = f.complete() && spec &&
                    layout->find_slice(f.shard, static_cast<size_t>(spec - layout->ptc().tensors.data())) >= 0;
  c.done = full ? 1 : 0;
  c.short_of = !full;
  return c;
}

void PendingStep::add(const FileCount& c, bool remove) {
  auto step = [remove](size_t& n, size_t by) { n = remove ? n - by : n + by; };
  auto flip = [](size_t& n, bool before, bool now) {
    if (before != now) n = now ? n + 1 : n - 1;
  };
  step(tally_.open, c.open);
  step(tally_.failed, c.failed);
  step(tally_.unplaced, c.unplaced);
  if (c.shard < 0) return;
  const auto i = static_cast<size_t>(c.shard);
  const bool whole_before = shard_whole(i), broken_before = tally_.files[i] > 0 && !whole_before;
  step(tally_.files[i], 1);
  step(tally_.done[i], c.done);
  step(tally_.short_of[i], c.short_of);
  const bool whole_now = shard_whole(i), broken_now = tally_.files[i] > 0 && !whole_now;
  flip(tally_.whole, whole_before, whole_now);
  flip(tally_.broken, broken_before, broken_now);
}

void PendingStep::note(PendingFile& f) {
  mine(*this, f);
  const FileCount now = count_of(f);
  if (now == f.counted) return;
  add(f.counted, true);
  add(now, false);
  f.counted = now;
}

void PendingStep::recount() {
  const size_t n = layout ? layout->shards().size() : 0;
  tally_ = Tally{};
  tally_.files.assign(n, 0);
  tally_.done.assign(n, 0);
  tally_.short_of.assign(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (shard_whole(i)) ++tally_.whole;  // a shard holding no tensor is written by nobody
  for (auto& [rel, f] : files) {
    mine(*this, *f);
    f->counted = FileCount{};
    note(*f);
  }
}

bool PendingStep::ptc_complete() const {
  auto it = files.find("ptc.json");
  if (it == files.end()) return false;
  const PendingFile& f = *it->second;
  mine(*this, f);
  return f.complete();
}

bool PendingStep::part_complete() const {
  if (!layout || removed || committing || !failure.empty()) return false;
  if (!ptc_complete()) return false;
  return tally_.open == 0 && tally_.failed == 0 && tally_.unplaced == 0 && tally_.broken == 0;
}

bool PendingStep::complete() const { return part_complete() && tally_.whole == layout->shards().size(); }

uint64_t PendingStep::bytes_written() const {
  uint64_t n = 0;
  for (const auto& [rel, f] : files) {
    mine(*this, *f);
    n += f->data_written();
  }
  return n;
}

uint64_t PendingStep::bytes_total() const {
  if (!layout) return 0;
  uint64_t n = 0;
  for (const auto& shard : layout->shards())
    for (const auto& sl : layout->slices(shard)) n += layout->bytes(sl);
  return n;
}

}  // namespace ptcfs
