// The S3 tier's disk budget (daemon/durable/disk_budget.h).
#include "daemon/durable/disk_budget.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/durable/durable_plan.h"
#include "daemon/durable/evicted_blob.h"
#include "daemon/store/checksum.h"
#include "daemon/store/file_util.h"
#include "daemon/store/parallel.h"
#include "daemon/store/store.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"
#include "ptc/model.h"

namespace ptcfs::durable {

namespace {

constexpr uint64_t kChunk = uint64_t{16} << 20;  // the largest ranged GET of a refill
constexpr unsigned kInFlight = 4;
constexpr int64_t kMinIdleSeconds = 10;                // a step read or committed more recently is not evicted
constexpr uint64_t kMaxManifest = uint64_t{16} << 20;  // a copy's ptcfs-export.json, read whole

std::string refill_path(const BlobStore& blobs, uint64_t id) { return blobs.path(id) + ".refill"; }

// XXH3 of the ranges' bytes of an open file, in order.
Result<uint64_t> hash_ranges(int fd, const std::vector<CopyRange>& ranges, const std::string& what) {
  Xxh3Stream h;
  std::string buf;
  for (const auto& r : ranges)
    for (uint64_t off = 0; off < r.len;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, r.len - off));
      buf.resize(n);
      PTC_ASSIGN_OR_RETURN(size_t got, read_full(fd, r.blob_off + off, buf.data(), n, what));
      if (got != n) return corrupt(what + ": shorter than the bytes its versions use");
      h.update(buf.data(), n);
      off += n;
    }
  return h.digest();
}

// One ranged GET of a refill: bytes [off, off + len) of range r.
struct Piece {
  const CopyRange* r;
  uint64_t off, len;
};

}  // namespace

struct DiskBudget::Refiller {
  Store& store;
  std::unique_ptr<transport::S3Client> s3;

  Status refill(uint64_t id) {
    const auto t0 = std::chrono::steady_clock::now();
    BlobStore& blobs = store.blobs();
    const std::string key = evicted_key(id);
    std::optional<std::string> text;
    PTC_RETURN_IF_ERROR(store.scan_meta(key, [&](std::string_view k, std::string_view v) {
      if (k == key) text = std::string(v);
      return Status::ok();
    }));
    if (!text) return internal("blob " + blobs.path(id) + " is evicted but its record " + key + " is gone");
    PTC_ASSIGN_OR_RETURN(const EvictedBlob e, evicted_from_json(*text, key));
    const std::string tmp = refill_path(blobs, id);
    const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_error("fetching back blob " + tmp, errno);
    Status s = fill(fd, e, tmp);
    ::close(fd);
    // A read sees EIO whatever S3 said (an object gone is not a file gone, a refused key not the
    // reader's permission), but for S3 not answering (EHOSTUNREACH: try again later).
    if (!s && s.code() != Code::kCorrupt && s.code() != Code::kUnavailable && s.code() != Code::kIo)
      s = Status(Code::kIo, s.message());
    if (s)
      s = ::rename(tmp.c_str(), blobs.path(id).c_str()) == 0 ? sync_dir(blobs.dir())
                                                             : io_error("fetching back blob " + tmp, errno);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    metrics::operation("s3_refill", s.is_ok(), seconds, e.covered());
    if (!s) {
      ::unlink(tmp.c_str());
      log::error("fetching back evicted blob {:016x} from {}: {}", id, s3->where(""), s.to_string());
      return s;
    }
    WriteBatch b;
    b.del(key);
    if (auto w = store.write_meta(b); !w) log::warn("dropping the record of blob {:016x}: {}", id, w.to_string());
    log::info("fetched back evicted blob {:016x} ({} bytes in {} ranges) from {} in {:.2f} s", id, e.covered(),
              e.ranges.size(), s3->where(""), seconds);
    return Status::ok();
  }

  // The ranges' bytes into fd, checked against the record; synced.
  Status fill(int fd, const EvictedBlob& e, const std::string& tmp) {
    if (::ftruncate(fd, static_cast<off_t>(e.size)) != 0) return io_error("sizing " + tmp, errno);
    std::vector<Piece> pieces;
    for (const auto& r : e.ranges)
      for (uint64_t off = 0; off < r.len; off += kChunk) pieces.push_back({&r, off, std::min(kChunk, r.len - off)});
    PTC_RETURN_IF_ERROR(parallel_for(pieces.size(), kInFlight, [&]() -> Worker {
      auto buf = std::make_shared<std::string>();
      return [&, buf](size_t i) -> Status {
        const Piece& p = pieces[i];
        buf->resize(p.len);
        PTC_RETURN_IF_ERROR(s3->get_range(p.r->object, p.r->object_off + p.off, buf->data(), p.len));
        const auto at = static_cast<off_t>(p.r->blob_off + p.off);
        for (size_t done = 0; done < p.len;) {
          const ssize_t n = ::pwrite(fd, buf->data() + done, p.len - done, at + static_cast<off_t>(done));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) return io_error("writing " + tmp, n < 0 ? errno : EIO);
          done += static_cast<size_t>(n);
        }
        return Status::ok();
      };
    }));
    PTC_ASSIGN_OR_RETURN(const uint64_t got, hash_ranges(fd, e.ranges, tmp));
    if (got != e.xxh3) {
      std::string objects;
      for (const auto& r : e.ranges)
        if (objects.find(r.object) == std::string::npos) objects += (objects.empty() ? "" : ", ") + s3->where(r.object);
      return corrupt("the bytes of " + objects + " are not the ones evicted (XXH3-64 differs): the copy was changed " +
                     "or damaged since; not served");
    }
    if (::fsync(fd) != 0) return io_error("syncing " + tmp, errno);
    return Status::ok();
  }
};

DiskBudget::DiskBudget(Store& store, std::unique_ptr<transport::S3Client> s3, uint64_t budget_bytes)
    : store_(store), refiller_(std::make_shared<Refiller>(Refiller{store, std::move(s3)})), budget_(budget_bytes) {
  BlobStore& blobs = store_.blobs();
  // Fetches cut short by a crash.
  if (auto names = list_dir(blobs.dir()))
    for (const auto& n : *names)
      if (n.size() > 7 && n.compare(n.size() - 7, 7, ".refill") == 0) ::unlink((blobs.dir() + "/" + n).c_str());
  WriteBatch done;
  auto s = store_.scan_meta(kEvictedPrefix, [&](std::string_view key, std::string_view value) {
    auto e = evicted_from_json(value, std::string(key));
    if (!e) {
      log::warn("ignoring a malformed record of an evicted blob: {}", e.status().to_string());
      return Status::ok();
    }
    struct stat st {};
    if (::stat(blobs.path(e->blob).c_str(), &st) == 0)
      done.del(std::string(key));  // fetched back before a crash dropped the record
    else
      blobs.note_evicted(e->blob, e->size);
    return Status::ok();
  });
  if (!s) log::warn("reading the records of evicted blobs: {}", s.to_string());
  if (!done.empty()) (void)store_.write_meta(done);
  auto r = refiller_;
  blobs.set_refill(std::make_shared<const BlobStore::Refill>([r](uint64_t id) { return r->refill(id); }));
}

DiskBudget::~DiskBudget() { store_.blobs().set_refill(nullptr); }

Result<std::optional<DiskBudget::FromCopy>> DiskBudget::restore(const std::string& job, const std::string& step,
                                                                uint64_t version, const std::string& origin,
                                                                const std::string& copy_origin,
                                                                const ptc::Layout& layout,
                                                                const std::vector<size_t>& shards, WriteBatch& b) {
  transport::S3Client& s3 = *refiller_->s3;
  const std::string dir = step_prefix(job, step);
  PTC_ASSIGN_OR_RETURN(const auto head, s3.head(dir + kPtcJson));
  if (!head)  // none yet, or one being written: asked again later
    return not_found(s3.where(dir) + " holds no whole copy (no ptc.json) yet");
  PTC_ASSIGN_OR_RETURN(const std::string text, s3.get(dir + kManifest, kMaxManifest));
  PTC_ASSIGN_OR_RETURN(const formats::ExportManifest m,
                       formats::parse_export_manifest(text, s3.where(dir + kManifest)));
  const bool same = !origin.empty() && m.origin == origin && m.version == version;
  if (!same && (copy_origin.empty() || m.origin != copy_origin)) {
    log::info(
        "{} is a copy of another step of that name, or of a version the other nodes do not know "
        "(version {}); not restored from it",
        s3.where(dir), m.version);
    return std::optional<FromCopy>{};
  }
  // An older version of these tensors (the step repartitioned since): at the copy's own layout.
  std::optional<ptc::Layout> copy_layout;
  if (!same) {
    PTC_ASSIGN_OR_RETURN(const std::string ptc_text, s3.get(dir + kPtcJson, kMaxManifest));
    PTC_ASSIGN_OR_RETURN(const ptc::Ptc ptc, ptc::parse_ptc_json(ptc_text, s3.where(dir + kPtcJson)));
    PTC_ASSIGN_OR_RETURN(copy_layout, ptc::Layout::make(ptc, ptc.parallelism), s3.where(dir + kPtcJson));
  }
  BlobStore& blobs = store_.blobs();
  std::vector<uint64_t> made;
  auto r =
      plan_copy_restore(same ? layout : *copy_layout, m, dir, layout, shards, [&](uint64_t size) -> Result<uint64_t> {
        PTC_ASSIGN_OR_RETURN(const uint64_t id, blobs.create_evicted(size));
        made.push_back(id);
        return id;
      });
  if (!r) {
    for (uint64_t id : made) {
      (void)blobs.remove(id);
      blobs.settle(id);
    }
    return r.status();
  }
  for (const auto& e : r->blobs) b.put(evicted_key(e.blob), evicted_json(e));
  return std::optional<FromCopy>{FromCopy{std::move(r).value(), VersionId{m.version, m.origin, 0}}};
}

void DiskBudget::forget_unused() {
  BlobStore& blobs = store_.blobs();
  const auto evicted = blobs.evicted();
  if (evicted.empty()) return;
  // Pending blobs first (a catch-up's restore, not committed yet): a commit publishes its version
  // before it settles them, so one settled after this is in the snapshot taken next.
  std::set<uint64_t> pending;
  for (uint64_t id : evicted)
    if (blobs.is_pending(id)) pending.insert(id);
  // The snapshot next: a version it holds that a commit retires meanwhile is in the pinned set
  // read after (while a reader still holds it).
  const auto snap = store_.snapshot();
  std::set<uint64_t> used = store_.pinned_blobs();
  for (const auto& [_, v] : snap->steps)
    for (uint64_t b : v->blobs_used()) used.insert(b);
  WriteBatch b;
  std::vector<uint64_t> gone;
  for (uint64_t id : evicted)
    if (!used.count(id) && !pending.count(id)) {
      b.del(evicted_key(id));
      gone.push_back(id);
    }
  if (gone.empty()) return;
  if (auto s = store_.write_meta(b); !s) {
    log::warn("dropping the records of evicted blobs no version uses: {}", s.to_string());
    return;
  }
  for (uint64_t id : gone) (void)blobs.remove(id);
}

void DiskBudget::pass(const std::function<bool(const StepVersion&)>& copy_of, const std::function<bool()>& stopping) {
  forget_unused();
  if (budget_ == 0) return;
  BlobStore& blobs = store_.blobs();
  auto ids = blobs.list();
  if (!ids) return;
  uint64_t total = 0;
  for (uint64_t id : *ids) total += blobs.size_of(id).value_or(0);
  if (total <= budget_) return;
  const auto snap = store_.snapshot();
  std::set<uint64_t> kept = store_.pinned_blobs();
  std::vector<std::shared_ptr<const StepVersion>> durable;
  std::map<uint64_t, std::vector<CopyRange>> ranges;
  for (const auto& [key, v] : snap->steps) {
    const bool ok =
        !v->origin().empty() && copy_of(*v) && copy_ranges(*v, step_prefix(key.first, key.second), ranges).is_ok();
    if (ok) {
      durable.push_back(v);
    } else {
      for (uint64_t b : v->blobs_used()) kept.insert(b);
    }
  }
  // Least recently used first: read, or committed (a step saved a minute ago and not read yet is
  // the one a job reads next).
  const auto used = [](const StepVersion& v) { return std::max(v.last_read(), v.mtime()); };
  std::stable_sort(durable.begin(), durable.end(), [&](const auto& a, const auto& b) { return used(*a) < used(*b); });
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& v : durable) {
    // A step in use is kept whatever the budget: evicting what a reader is going through would
    // have it fetch back what the next pass evicts again.
    if (now - used(*v) < kMinIdleSeconds) continue;
    uint64_t freed = 0;
    size_t n = 0;
    for (uint64_t id : v->blobs_used()) {
      if (total <= budget_ || stopping()) break;
      if (kept.count(id) || blobs.is_pending(id) || blobs.is_evicted(id) || !ranges.count(id)) continue;
      uint64_t f = 0;
      if (auto s = evict(id, merge_ranges(std::move(ranges[id])), f); !s) {
        log::warn("evicting blob {:016x} of {}/{}: {}", id, v->job(), v->step(), s.to_string());
        continue;
      }
      ranges.erase(id);
      freed += f;
      total -= std::min(total, f);
      ++n;
    }
    if (n)
      log::info(
          "evicted {} blobs ({} bytes) of {}/{}, read least recently, to stay under the disk budget of {} bytes "
          "(its durable copy holds them)",
          n, freed, v->job(), v->step(), budget_);
    if (total <= budget_) break;
  }
}

Status DiskBudget::evict(uint64_t blob, std::vector<CopyRange> ranges, uint64_t& freed) {
  const auto t0 = std::chrono::steady_clock::now();
  BlobStore& blobs = store_.blobs();
  PTC_ASSIGN_OR_RETURN(auto f, blobs.file(blob));
  EvictedBlob e{blob, f->size(), 0, std::move(ranges)};
  if (e.ranges.empty() || e.ranges.back().blob_off + e.ranges.back().len > e.size)
    return internal("its versions name bytes past its end");
  PTC_ASSIGN_OR_RETURN(e.xxh3, hash_ranges(f->fd(), e.ranges, blobs.path(blob)));
  WriteBatch b;
  b.put(evicted_key(blob), evicted_json(e));
  PTC_RETURN_IF_ERROR(store_.write_meta(b));
  if (auto s = blobs.evict(blob, e.size); !s) {
    WriteBatch undo;
    undo.del(evicted_key(blob));
    (void)store_.write_meta(undo);
    return s;
  }
  freed = e.size;
  metrics::operation("s3_evict", true, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                     e.size);
  return Status::ok();
}

}  // namespace ptcfs::durable
