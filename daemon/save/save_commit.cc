// Committing a pending step (daemon/save/save_service.h): the version it becomes, committed
// here on one node, or as this node's part of a cluster's two-phase commit.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <thread>

#include "daemon/save/save_service.h"
#include "daemon/store/checksum.h"
#include "daemon/store/parallel.h"
#include "daemon/store/prepared.h"
#include "fs/read_buffer.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"
#include "ptc/formats/rank_file.h"

namespace ptcfs {

namespace {
// The commit hashes a step's slices on up to this many threads, one per this many bytes.
constexpr size_t kHashThreads = 4;
constexpr uint64_t kHashBytesPerThread = 64 << 20;

// Where a held slice's bytes are: a blob, an offset and a length.
struct SliceBytes {
  std::shared_ptr<BlobWriter> blob;
  uint64_t off = 0, len = 0;
};

// The bytes of every slice of the shards `placement` holds (indexed like the layout's shards, then
// slices), and every blob the step's files use, each once (a pack holds many files).
void gather(const PendingStep& s, const StepPlacement& placement, std::vector<std::vector<SliceBytes>>& bytes,
            std::map<uint64_t, std::shared_ptr<BlobWriter>>& writers) PTC_REQUIRES(s.mu) {
  const ptc::Layout& layout = *s.layout;
  bytes.resize(layout.shards().size());
  for (size_t si = 0; si < layout.shards().size(); ++si) {
    if (!placement.holds(si)) continue;
    const auto& shard = layout.shards()[si];
    const auto& slices = layout.slices(shard);
    const auto whole_it = s.files.find(shard.name() + ".safetensors");
    const PendingFile* whole = whole_it == s.files.end() ? nullptr : whole_it->second.get();
    if (whole) mine(s, *whole);
    for (size_t j = 0; j < slices.size(); ++j) {
      const PendingFile& f = whole ? *whole : *s.files.at(shard.name() + "/" + layout.tensor(slices[j]).name + ".npy");
      mine(s, f);
      SliceBytes& sb = bytes[si].emplace_back();
      sb.blob = f.place.blob;
      if (whole) {
        const auto& e = f.check.header.entries[f.check.entry_of_slice[j]];
        sb.off = f.place.base + f.check.header.data_start + e.begin;
        sb.len = e.end - e.begin;
      } else {
        sb.off = f.place.base + f.check.npy.data_start;  // its region of its own blob or of its shard's pack
        sb.len = f.check.npy.data_bytes;
      }
    }
  }
  for (const auto& [rel, f] : s.files) {
    mine(s, *f);
    if (f->place.blob) writers.emplace(f->place.blob->id(), f->place.blob);
  }
}

// The slices' extents, their padding zeroed in place first unless that was done (`sealed`).
Result<std::vector<std::vector<StoredSlice>>> extents_of(const ptc::Layout& layout,
                                                         const std::vector<std::vector<SliceBytes>>& bytes,
                                                         bool sealed) {
  PTC_ASSIGN_OR_RETURN(auto padding, formats::layout_padding(layout));
  std::vector<std::vector<StoredSlice>> stored(layout.shards().size());
  for (size_t si = 0; si < bytes.size(); ++si)
    for (size_t j = 0; j < bytes[si].size(); ++j) {
      const SliceBytes& sb = bytes[si][j];
      if (!sealed)
        for (const auto& [poff, plen] : padding[si][j])
          for (uint64_t done = 0; done < plen;) {
            const uint64_t n = std::min<uint64_t>(plen - done, fs::kZeroBlock);
            PTC_RETURN_IF_ERROR(sb.blob->write_at(sb.off + poff + done, fs::zero_block(), n));
            done += n;
          }
      stored[si].push_back(StoredSlice{{Extent{sb.blob->id(), sb.off, sb.len, 0}}, std::nullopt, 1});
    }
  return stored;
}

// Checksums, as import computes them, from the synced blobs' mappings: the slices, largest
// first, shared out between a few threads when there are many bytes.
Status hash_slices(BlobStore& blobs, std::vector<std::vector<StoredSlice>>& stored, const std::string& name) {
  std::vector<std::pair<StoredSlice*, std::shared_ptr<const BlobFile>>> todo;
  uint64_t total = 0;
  for (auto& shard : stored)
    for (auto& sl : shard) {
      const Extent& x = sl.extents.front();
      auto b = blobs.file(x.blob);
      if (!b || !(*b)->data() || x.offset + x.len > (*b)->mapped_size())
        return b ? corrupt("blob of " + name + " is shorter than written") : b.status();
      todo.emplace_back(&sl, *b);
      total += x.len;
    }
  std::sort(todo.begin(), todo.end(),
            [](const auto& a, const auto& b) { return a.first->extents[0].len > b.first->extents[0].len; });
  const size_t threads =
      std::clamp<size_t>(total / kHashBytesPerThread, 1,
                         std::min<size_t>(kHashThreads, std::max(1u, std::thread::hardware_concurrency())));
  return parallel_for(todo.size(), static_cast<unsigned>(threads), [&]() -> Worker {
    return [&](size_t i) {
      const Extent& x = todo[i].first->extents[0];
      todo[i].first->xxh3 = xxh3_of(todo[i].second->data() + x.offset, x.len);
      return Status::ok();
    };
  });
}
}  // namespace

// The version a pending step becomes: every held shard's slices as extents of its files'
// blobs (padding zeroed in place), the blobs synced, every slice hashed. Marks the step as
// committing (no more writes); on error the step is marked failed.
Result<PreparedChange> SaveService::build_change(const std::shared_ptr<PendingStep>& s, StepPlacement placement) {
  // Taken under the lock; the step is committing from then on, so no file changes until the
  // commit ends.
  std::vector<std::vector<SliceBytes>> bytes;
  std::map<uint64_t, std::shared_ptr<BlobWriter>> writers;
  ptc::Layout layout;
  bool sealed = false;  // prepared before: the padding is zeroed and the blobs closed
  {
    MutexLock lock(s->mu);
    // The tally said so (PendingStep::note); the commit goes by a pass over every file.
    if (!s->part_complete_scan()) return error(Code::kFailedPrecondition, s->name() + " is not complete here");
    s->committing = true;  // no more writes, creates or removals
    layout = *s->layout;
    sealed = s->sealed;
    gather(*s, placement, bytes, writers);
  }
  auto fail = [&](const Status& st) -> Status {
    MutexLock lock(s->mu);
    s->failure = "the commit failed: " + st.message();
    s->committing = false;
    return st;
  };
  auto stored = extents_of(layout, bytes, sealed);
  if (!stored) return fail(stored.status());
  // The change takes the blobs at the end: until then they are the step's (a failed commit
  // leaves the step pending, its blobs with it).
  std::vector<uint64_t> blobs;
  for (const auto& [id, w] : writers) {
    if (auto st = w->finish(); !st) return fail(st);
    blobs.push_back(id);
  }
  {
    MutexLock lock(s->mu);
    s->sealed = true;
  }
  if (auto st = hash_slices(store_.blobs(), *stored, s->name()); !st) return fail(st);
  PreparedChange change(store_);
  change.next = store_.new_version(s->job, s->step, 1, layout, std::move(stored).value(), std::move(placement));
  change.blobs = std::move(blobs);
  {
    MutexLock lock(s->mu);
    change.claims.push_back(std::move(s->claim));  // released when the change commits or aborts
  }
  return change;
}

void SaveService::forget(const std::string& job, const std::string& step) {
  std::shared_ptr<PendingStep> s;
  {
    std::lock_guard lock(mu_);
    auto it = steps_.find({job, step});
    if (it != steps_.end()) {
      s = std::move(it->second);
      steps_.erase(it);
    }
  }
  if (s) {
    // Its files point at it: let both go (a handle still open keeps its own file).
    MutexLock lock(s->mu);
    s->files.clear();
    s->packs.clear();
  }
  changed();
}

// ---- the runner's side: where a step stands, its change, its outcome ------------------

SaveService::PartState SaveService::part_state(const std::string& job, const std::string& step) const {
  PartState st;
  auto s = find(job, step);
  if (!s) return st;
  MutexLock lock(s->mu);
  st.pending = true;
  st.ready = s->part_complete();
  // The tally says so (PendingStep::note); a commit goes by a pass over every file.
  st.whole = st.ready && s->complete() && s->complete_scan();
  if (st.ready && s->complete() && !st.whole)
    log::error("{}: its tally says complete, a pass over its files says not (a bug; it stays pending)", s->name());
  st.bytes = s->bytes_total();
  if (s->layout) {
    st.ptc_text = ptc::ptc_to_json(s->layout->ptc());
    st.ptc_digest = xxh3_of(st.ptc_text.data(), st.ptc_text.size());
    const std::vector<bool> whole = s->complete_shards();
    for (size_t i = 0; i < whole.size(); ++i)
      if (whole[i]) st.complete.push_back(s->layout->shards()[i].name());
  }
  return st;
}

std::vector<std::pair<std::string, std::string>> SaveService::ready_parts() const {
  std::vector<std::shared_ptr<PendingStep>> steps;
  {
    std::lock_guard lock(mu_);
    for (const auto& [_, s] : steps_) steps.push_back(s);
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& s : steps) {
    MutexLock lock(s->mu);
    if (ready(*s)) out.emplace_back(s->job, s->step);
  }
  return out;
}

Result<PreparedChange> SaveService::prepare_part(const std::string& job, const std::string& step,
                                                 StepPlacement placement) {
  auto s = find(job, step);
  if (!s) return not_found("no step " + job + "/" + step + " is being saved here");
  return build_change(s, std::move(placement));
}

void SaveService::part_done(const std::string& job, const std::string& step, bool committed, const std::string& why) {
  if (committed) {
    forget(job, step);
    return;
  }
  auto s = find(job, step);
  if (!s) return;
  MutexLock lock(s->mu);
  s->committing = false;  // ready again: the node says so every 5 s, and the commit is tried again
  // A change not taken back (the abort said why trying again would not help, or its own commit
  // failed here) took the blobs with it.
  if (!s->claim && s->failure.empty())
    s->failure = why.empty() ? "the commit failed on this node; remove the step (ptcfs rm) and save it again"
                             : "the commit was aborted: " + why;
}

void SaveService::take_back(const std::string& job, const std::string& step, PreparedChange& change) {
  auto s = find(job, step);
  if (!s) return;
  MutexLock lock(s->mu);
  if (s->removed || !s->committing) return;
  // The blobs stay the step's files' (pending in the store, finished: sealed), and so does its
  // name: an abort (a node fenced or unreachable at that moment) does not lose a complete save.
  change.blobs.clear();
  for (auto& c : change.claims)
    if (c.kind() == Claim::kNewStep && c.job() == job && c.name() == step) s->claim = std::move(c);
}

}  // namespace ptcfs
