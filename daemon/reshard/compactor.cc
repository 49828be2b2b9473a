#include "daemon/reshard/compactor.h"

#include "daemon/store/parallel.h"
#include "daemon/store/checksum.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <mutex>
#include <thread>
#include <tuple>

namespace ptcfs {
namespace {

constexpr uint64_t kChunk = 16 << 20;

// Two slices with the same key hold the same bytes. A strided slice's key carries its row
// count as a leading pseudo-extent.
std::vector<Extent> dedupe_key(const StoredSlice& s) {
  std::vector<Extent> k;
  k.reserve(s.extents.size() + 1);
  k.push_back(Extent{~uint64_t{0}, s.rows, 0, 0});
  k.insert(k.end(), s.extents.begin(), s.extents.end());
  return k;
}

struct ExtentsLess {
  bool operator()(const std::vector<Extent>& a, const std::vector<Extent>& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](const Extent& x, const Extent& y) {
      return std::tie(x.blob, x.offset, x.len, x.stride) < std::tie(y.blob, y.offset, y.len, y.stride);
    });
  }
};

// A part of one slice to copy.
struct Part {
  const StoredSlice* slice;  // its old extents
  uint64_t slice_off;        // first byte of the slice copied
  uint64_t len;
  std::optional<uint64_t>* hash;  // set when the part is the whole slice
};

// One write of at most kChunk contiguous bytes of a new blob, gathered from parts (many
// small slices share a job, so each costs no write of its own).
struct Job {
  size_t blob;        // index into result.blobs
  uint64_t blob_off;  // where the first part goes
  uint64_t len = 0;
  std::vector<Part> parts;
};

constexpr const char* kShortBlob = "a blob is shorter than the extents that refer to it";

// Copies a slice's pieces, one after another, into memory (source blobs are mapped).
class CopySink final : public PieceSink {
 public:
  explicit CopySink(std::byte* dst) : dst_(dst) {}
  std::byte* end() const { return dst_; }
  Status zeros(uint64_t n) override {
    std::memset(dst_, 0, n);
    dst_ += n;
    return Status::ok();
  }
  Status blob(const std::shared_ptr<const BlobFile>& file, uint64_t off, uint64_t n) override {
    if (off + n > file->mapped_size()) return corrupt(kShortBlob);
    std::memcpy(dst_, file->data() + off, n);
    dst_ += n;
    return Status::ok();
  }

 private:
  std::byte* dst_;
};

}  // namespace

Result<Selection> select_compaction(const std::vector<std::vector<StoredSlice>>& stored, const CompactionPolicy& policy,
                                    const std::function<Result<uint64_t>(uint64_t)>& blob_size) {
  Selection sel(stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    sel[i].resize(stored[i].size());
    for (size_t j = 0; j < stored[i].size(); ++j) {
      const StoredSlice& s = stored[i][j];
      const uint64_t n = s.extents.size();
      if (s.rows > 1)
        sel[i][j] = n > 0 && row_bytes(s) / n < policy.min_piece;  // tiny pieces
      else
        sel[i][j] = n > 1 && row_bytes(s) / n < policy.min_avg_extent;  // fragmented
    }
  }
  // Slices moved out of a blob lower its live fraction, which may select more slices:
  // iterate to a fixed point, so that every blob the result keeps is at least
  // min_blob_live used by the slices that stay.
  std::map<uint64_t, uint64_t> sizes;
  for (bool changed = true; changed;) {
    changed = false;
    // Live bytes of each blob: the union of the ranges the unselected slices use
    // (replicated slices may share bytes).
    std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> ranges;
    for (size_t i = 0; i < stored.size(); ++i)
      for (size_t j = 0; j < stored[i].size(); ++j)
        if (!sel[i][j]) {
          const StoredSlice& s = stored[i][j];
          for (const auto& e : s.extents) {
            if (e.blob == kZeroBlob) continue;
            if (s.rows == 1 || e.stride == e.len) {
              ranges[e.blob].emplace_back(e.offset, e.offset + s.rows * e.len);
            } else {
              for (uint64_t r = 0; r < s.rows; ++r)
                ranges[e.blob].emplace_back(e.offset + r * e.stride, e.offset + r * e.stride + e.len);
            }
          }
        }
    std::set<uint64_t> mostly_dead;
    for (auto& [id, rs] : ranges) {
      std::sort(rs.begin(), rs.end());
      uint64_t live = 0, end = 0;
      for (auto [lo, hi] : rs) {
        lo = std::max(lo, end);
        if (hi > lo) live += hi - lo;
        end = std::max(end, hi);
      }
      if (!sizes.count(id)) {
        PTC_ASSIGN_OR_RETURN(sizes[id], blob_size(id));
      }
      if (static_cast<double>(live) < policy.min_blob_live * static_cast<double>(sizes[id])) mostly_dead.insert(id);
    }
    for (size_t i = 0; i < stored.size(); ++i)
      for (size_t j = 0; j < stored[i].size(); ++j) {
        if (sel[i][j]) continue;
        for (const auto& e : stored[i][j].extents)
          if (mostly_dead.count(e.blob)) {
            sel[i][j] = true;
            changed = true;
            break;
          }
      }
  }
  return sel;
}

CompactionStats compaction_stats(const std::vector<std::vector<StoredSlice>>& stored, const Selection& selection) {
  CompactionStats st;
  std::set<std::vector<Extent>, ExtentsLess> seen;
  for (size_t i = 0; i < stored.size(); ++i)
    for (size_t j = 0; j < stored[i].size(); ++j) {
      const StoredSlice& s = stored[i][j];
      if (!selection[i][j]) {
        st.extents += s.extents.size();
        continue;
      }
      ++st.extents;
      ++st.slices;
      if (!seen.insert(dedupe_key(s)).second) continue;  // shares an earlier identical slice's copy
      for (const auto& e : s.extents)
        if (e.blob != kZeroBlob) st.bytes_from_blobs += s.rows * e.len;
    }
  return st;
}

namespace {

// Where one compacted slice goes: slice j of shard s, at `off` of new blob `blob`.
struct Target {
  size_t s, j, blob;
  uint64_t off, bytes;
};

// What compact() does, planned before a byte is copied.
struct CompactionPlan {
  std::vector<Target> targets;
  std::vector<std::pair<std::pair<size_t, size_t>, size_t>> aliases;  // (s, j) -> target sharing its copy
  std::vector<Job> jobs;
  std::vector<std::optional<uint64_t>> hashes;  // per target, when copied by one job
};

// Step 1: the new blobs (one per shard that has slices to compact, made in `res`) and where
// each selected slice goes in them, packed in order. Slices with identical extents (a
// replicated tensor on several TP ranks) are copied once and share the copy.
Status plan_targets(BlobStore& blobs, const std::vector<std::vector<StoredSlice>>& stored, const Selection& selection,
                    CompactionPlan& plan, CompactionResult& res) {
  std::map<std::vector<Extent>, size_t, ExtentsLess> first;
  for (size_t s = 0; s < stored.size(); ++s) {
    std::optional<size_t> blob;
    uint64_t off = 0;
    for (size_t j = 0; j < stored[s].size(); ++j) {
      if (!selection[s][j]) continue;
      const auto key = dedupe_key(stored[s][j]);
      if (auto it = first.find(key); it != first.end()) {
        plan.aliases.push_back({{s, j}, it->second});
        continue;
      }
      first.emplace(key, plan.targets.size());
      if (!blob) {
        PTC_ASSIGN_OR_RETURN(BlobWriter w, blobs.create());
        res.blobs.push_back(std::move(w));
        blob = res.blobs.size() - 1;
      }
      const uint64_t bytes = slice_bytes(stored[s][j]);
      plan.targets.push_back(Target{s, j, *blob, off, bytes});
      off += bytes;
      res.bytes += bytes;
      ++res.slices;
    }
  }
  return Status::ok();
}

// Step 2: the copy cut into jobs of at most kChunk contiguous destination bytes (small
// slices share a job); a target copied by one job gets its checksum on the way.
void plan_jobs(const std::vector<std::vector<StoredSlice>>& old, CompactionPlan& plan) {
  plan.hashes.resize(plan.targets.size());
  for (size_t t = 0; t < plan.targets.size(); ++t) {
    const Target& tg = plan.targets[t];
    for (uint64_t o = 0; o < tg.bytes; o += kChunk) {
      const uint64_t n = std::min(kChunk, tg.bytes - o);
      auto& jobs = plan.jobs;
      const bool joins = !jobs.empty() && jobs.back().blob == tg.blob &&
                         jobs.back().blob_off + jobs.back().len == tg.off + o && jobs.back().len + n <= kChunk;
      if (!joins) jobs.push_back(Job{tg.blob, tg.off + o, 0, {}});
      jobs.back().parts.push_back(Part{&old[tg.s][tg.j], o, n, tg.bytes <= kChunk ? &plan.hashes[t] : nullptr});
      jobs.back().len += n;
    }
  }
}

// Step 3: every source blob mapped once.
Result<std::map<uint64_t, std::shared_ptr<const BlobFile>>> map_sources(
    BlobStore& blobs, const std::vector<std::vector<StoredSlice>>& old, const std::vector<Target>& targets) {
  std::map<uint64_t, std::shared_ptr<const BlobFile>> maps;
  for (const auto& tg : targets)
    for (const auto& e : old[tg.s][tg.j].extents)
      if (e.blob != kZeroBlob && !maps.count(e.blob)) {
        PTC_ASSIGN_OR_RETURN(auto f, blobs.file(e.blob));
        if (!f->data()) return io_error("mapping blob " + blobs.path(e.blob), errno);
        maps.emplace(e.blob, std::move(f));
      }
  return maps;
}

// Step 4: the jobs run on every core, each gathering its parts through walk_slice into a
// buffer and writing it at once; then the new blobs are synced. On error every new blob goes.
Status copy_jobs(BlobStore& blobs, const CompactionPlan& plan,
                 const std::map<uint64_t, std::shared_ptr<const BlobFile>>& maps, const CompactionPolicy& policy,
                 const std::function<void(uint64_t, uint64_t)>& progress, CompactionResult& res) {
  const OpenBlob open = [&](uint64_t id) -> Result<std::shared_ptr<const BlobFile>> { return maps.at(id); };
  std::mutex mu;  // guards done and progress
  uint64_t done = 0;
  auto copy_job = [&](std::vector<std::byte>& buf, size_t i) -> Status {
    const Job& jb = plan.jobs[i];
    std::byte* out = buf.data();
    for (const Part& part : jb.parts) {
      // Gather [slice_off, slice_off + len) of the slice into out.
      CopySink sink(out);
      PTC_RETURN_IF_ERROR(walk_slice(*part.slice, part.slice_off, part.len, open, sink));
      if (sink.end() != out + part.len) return corrupt(kShortBlob);
      if (part.hash) *part.hash = xxh3_of(out, part.len);
      out += part.len;
    }
    PTC_RETURN_IF_ERROR(res.blobs[jb.blob].write_at(jb.blob_off, buf.data(), jb.len));
    std::lock_guard lock(mu);
    done += jb.len;
    if (progress) progress(done, res.bytes);
    return Status::ok();
  };
  const Status copied = parallel_for(plan.jobs.size(), policy.threads, [&]() -> Worker {
    auto buf = std::make_shared<std::vector<std::byte>>(kChunk);
    return [&, buf](size_t i) { return copy_job(*buf, i); };
  });
  if (!copied) {
    // Unfinished writers remove their files when res goes.
    return copied;
  }
  for (auto& w : res.blobs) {
    if (auto st = w.finish(); !st) {
      // Blobs already finished would outlive this failure: remove them all.
      for (auto& x : res.blobs) {
        (void)blobs.remove(x.id());
        blobs.settle(x.id());
      }
      return st;
    }
  }
  return Status::ok();
}

// Step 5: the selected slices point at their copies.
void point_at_copies(const CompactionPlan& plan, const CompactionResult& res,
                     std::vector<std::vector<StoredSlice>>& stored) {
  for (size_t t = 0; t < plan.targets.size(); ++t) {
    const Target& tg = plan.targets[t];
    StoredSlice& s = stored[tg.s][tg.j];
    s.extents = {Extent{res.blobs[tg.blob].id(), tg.off, tg.bytes, 0}};
    s.rows = 1;
    if (plan.hashes[t]) s.xxh3 = plan.hashes[t];
  }
  for (const auto& [sj, t] : plan.aliases) stored[sj.first][sj.second] = stored[plan.targets[t].s][plan.targets[t].j];
}

}  // namespace

Result<CompactionResult> compact(BlobStore& blobs, std::vector<std::vector<StoredSlice>>& stored,
                                 const Selection& selection, const CompactionPolicy& policy,
                                 const std::function<void(uint64_t, uint64_t)>& progress) {
  CompactionResult res;
  CompactionPlan plan;
  PTC_RETURN_IF_ERROR(plan_targets(blobs, stored, selection, plan, res));
  if (plan.targets.empty()) return res;
  const std::vector<std::vector<StoredSlice>> old = stored;  // the extents to read from
  plan_jobs(old, plan);
  PTC_ASSIGN_OR_RETURN(auto maps, map_sources(blobs, old, plan.targets));
  PTC_RETURN_IF_ERROR(copy_jobs(blobs, plan, maps, policy, progress, res));
  point_at_copies(plan, res, stored);
  return res;
}

}  // namespace ptcfs
