#include "daemon/durable/durable_tier.h"

#include <algorithm>
#include <ctime>

#include <nlohmann/json.hpp>

#include "daemon/store/checksum.h"
#include "daemon/store/failpoint.h"
#include "daemon/store/store.h"
#include "fs/views.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"
#include "ptc/model.h"

namespace ptcfs::durable {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
constexpr uint64_t kMaxSmallObject = 16 << 20;  // manifests, part records, ptc.json
constexpr uint64_t kMinPart = 5 << 20;          // S3's smallest part but the last

VersionId id_of(const StepVersion& v) { return {v.version(), v.origin(), v.mtime()}; }

// The metadata record of a multipart upload under way: {"file", "upload_id", "version", "origin"}.
constexpr std::string_view kUploadPrefix = "durable-upload/";
std::string upload_key(const std::string& job, const std::string& step) {
  return std::string(kUploadPrefix) + job + "/" + step;
}
}  // namespace

std::string_view state_name(StepDurability::State s) {
  switch (s) {
    case StepDurability::State::kLocal:
      return "local";
    case StepDurability::State::kUploading:
      return "uploading";
    case StepDurability::State::kWaiting:
      return "waiting";
    case StepDurability::State::kDurable:
      return "durable";
  }
  return "local";
}

DurableTier::DurableTier(Store& store, std::unique_ptr<transport::S3Client> s3,
                         std::unique_ptr<transport::S3Client> reads, TierOptions o)
    : store_(store),
      s3_(std::move(s3)),
      o_(std::move(o)),
      budget_(std::make_unique<DiskBudget>(store, std::move(reads), o_.disk_budget)) {
  // The steps made durable before this run (a repartition since keeps them durable), with the
  // origin of the version their copy is of (none in a record an older ptcfsd wrote).
  const auto snap = store_.snapshot();
  auto s = store_.scan_meta(Store::kDurablePrefix, [&](std::string_view key, std::string_view value) {
    const std::string rest(key.substr(Store::kDurablePrefix.size()));
    const size_t slash = rest.find('/');
    if (slash == std::string::npos) return Status::ok();
    const Key k{rest.substr(0, slash), rest.substr(slash + 1)};
    const json j = json::parse(value, nullptr, false);
    const auto member = [&](const char* m) {
      return j.is_object() && j.contains(m) && j[m].is_string() ? j[m].get<std::string>() : std::string();
    };
    // A restore's record whose catch-up never committed (a crash between the two) is not this
    // version's (restore()).
    const std::string restored_for = member("restored_for");
    auto it = snap->steps.find(k);
    if (!restored_for.empty() &&
        (it == snap->steps.end() || (it->second->origin() != restored_for && it->second->origin() != member("origin"))))
      return Status::ok();
    recorded_[k] = member("origin");
    return Status::ok();
  });
  if (!s) log::warn("reading the durable records: {}", s.to_string());
  s = store_.scan_meta(kUploadPrefix, [&](std::string_view key, std::string_view value) {
    const std::string rest(key.substr(kUploadPrefix.size()));
    const size_t slash = rest.find('/');
    const json j = json::parse(value, nullptr, false);
    LeftUpload u;
    if (slash == std::string::npos || !j.is_object() || !j.contains("file") || !j["file"].is_string() ||
        !j.contains("upload_id") || !j["upload_id"].is_string() || !j.contains("version") ||
        !j["version"].is_number_unsigned() || !j.contains("origin") || !j["origin"].is_string()) {
      log::warn("ignoring a malformed record of an upload under way: {}", key);
      return Status::ok();
    }
    u.file = j["file"].get<std::string>();
    u.upload_id = j["upload_id"].get<std::string>();
    u.version = j["version"].get<uint64_t>();
    u.origin = j["origin"].get<std::string>();
    u.part_bytes =
        j.contains("part_bytes") && j["part_bytes"].is_number_unsigned() ? j["part_bytes"].get<uint64_t>() : 0;
    left_[{rest.substr(0, slash), rest.substr(slash + 1)}] = std::move(u);
    return Status::ok();
  });
  if (!s) log::warn("reading the records of uploads under way: {}", s.to_string());
  worker_ = std::thread([this] { run(); });
}

DurableTier::~DurableTier() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void DurableTier::notice() {
  {
    std::lock_guard lock(mu_);
    wake_ = true;
  }
  cv_.notify_all();
}

std::optional<StepDurability> DurableTier::state(const std::string& job, const std::string& step) const {
  std::lock_guard lock(mu_);
  auto it = shown_.find({job, step});
  if (it == shown_.end()) return std::nullopt;
  return it->second;
}

std::string DurableTier::where() const { return s3_->where(""); }

Result<std::optional<DurableTier::Restored>> DurableTier::restore(const std::string& job, const std::string& step,
                                                                  uint64_t version, const std::string& origin,
                                                                  const std::string& copy_origin,
                                                                  const ptc::Layout& layout,
                                                                  const std::vector<size_t>& shards) {
  Restored out;
  PTC_ASSIGN_OR_RETURN(auto r, budget_->restore(job, step, version, origin, copy_origin, layout, shards, out.records));
  if (!r) return std::optional<Restored>{};
  out.shards = std::move(r->shards);
  out.copy = r->copy;
  // The tier takes the step as durable when it sees the version (pass()), as the other nodes do
  // (their records name the copy's version, kept through repartitions): `restored_for` until the
  // commit (restore_committed), so that a record left by a catch-up that never committed is not
  // taken for another version's.
  out.records.put(Store::durable_key(job, step),
                  json{{"version", out.copy.version}, {"origin", out.copy.origin}, {"restored_for", origin}}.dump());
  return std::optional<Restored>{std::move(out)};
}

Result<WriteBatch> DurableTier::record_restore(const std::string& job, const std::string& step, const Restored& r) {
  WriteBatch undo;
  for (const auto& e : r.shards.blobs) undo.del(evicted_key(e.blob));
  PTC_ASSIGN_OR_RETURN(auto had, store_.read_meta(Store::durable_key(job, step)));
  if (had)  // a version this node holds part of, held again: its record is put back
    undo.put(Store::durable_key(job, step), std::move(*had));
  else
    undo.del(Store::durable_key(job, step));
  PTC_RETURN_IF_ERROR(store_.write_meta(r.records),
                      "recording the blobs restored from " + s3_->where(step_prefix(job, step)));
  return undo;
}

void DurableTier::restore_committed(const std::string& job, const std::string& step, const Restored& r) {
  WriteBatch b;
  b.put(Store::durable_key(job, step), json{{"version", r.copy.version}, {"origin", r.copy.origin}}.dump());
  if (auto s = store_.write_meta(b); !s) log::warn("recording the durable copy of {}/{}: {}", job, step, s.to_string());
}

bool DurableTier::stopping() const {
  std::lock_guard lock(mu_);
  return stop_;
}

void DurableTier::set(const Key& key, const Work& w) {
  std::lock_guard lock(mu_);
  shown_[key] = w.d;
}

void DurableTier::run() {
  while (true) {
    pass();
    // The disk budget evicts only blobs of steps whose copy is of the version served.
    if (!stopping())
      budget_->pass(
          [this](const StepVersion& v) {
            auto it = recorded_.find({v.job(), v.step()});
            return it != recorded_.end() && !it->second.empty() && it->second == v.origin();
          },
          [this] { return stopping(); });
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, o_.poll, [this] { return stop_ || wake_; });
    if (stop_) return;
    wake_ = false;
  }
}

void DurableTier::pass() {
  const auto snap = store_.snapshot();
  // Steps gone (removed; the store removed their records with them): forgotten.
  for (auto it = recorded_.begin(); it != recorded_.end();)
    it = snap->steps.count(it->first) ? std::next(it) : recorded_.erase(it);
  if (first_pass_) {
    // Uploads an earlier run left open for steps gone or durable since: aborted (the others are
    // taken, or aborted, when their step's work starts).
    first_pass_ = false;
    for (auto it = left_.begin(); it != left_.end();) {
      if (snap->steps.count(it->first) && !recorded_.count(it->first)) {
        ++it;
        continue;
      }
      Work w;
      w.upload_id = it->second.upload_id;
      w.upload_file = it->second.file;
      end_upload(it->first, w, true);
      it = left_.erase(it);
    }
  }
  for (auto it = work_.begin(); it != work_.end();) {
    if (snap->steps.count(it->first)) {
      ++it;
      continue;
    }
    end_upload(it->first, it->second, true);
    std::lock_guard lock(mu_);
    shown_.erase(it->first);
    it = work_.erase(it);
  }
  for (const auto& [key, v] : snap->steps) {
    if (stopping()) return;
    Work& w = work_[key];
    if (recorded_.count(key) && w.serial != v->serial()) {
      // A new version: a repartition keeps the record, but a step removed and saved again under
      // the name (between two passes) lost it with the removal.
      bool still = false;
      auto s = store_.scan_meta(Store::durable_key(key.first, key.second), [&](std::string_view k, std::string_view) {
        still = still || k == Store::durable_key(key.first, key.second);
        return Status::ok();
      });
      if (s && !still) {
        recorded_.erase(key);
        w = Work{};
      }
    }
    if (!recorded_.count(key) && w.serial != v->serial() && !v->origin().empty()) {
      // A version seen for the first time with a durable record written for it: restored from
      // its copy by a catch-up (restore()), which wrote the record before the commit. (A record
      // left by a catch-up that never committed, a crash between the two, names another version.)
      std::string origin = store_.durable_origin(key.first, key.second);
      if (!origin.empty() &&
          (origin == v->origin() || store_.durable_origin(key.first, key.second, "restored_for") == v->origin()))
        recorded_[key] = std::move(origin);
    }
    if (recorded_.count(key)) {
      if (w.d.state != StepDurability::State::kDurable || w.serial != v->serial()) {
        w = Work{};
        w.serial = v->serial();
        w.d.state = StepDurability::State::kDurable;
        w.d.version = v->version();
        set(key, w);
      }
      continue;
    }
    if (Clock::now() < w.next_try) continue;
    const Status s = advance(key, v, w);
    if (s) {
      w.d.failures = 0;
      if (w.d.state == StepDurability::State::kWaiting) {
        // Polled again later and later while it waits for other nodes (up to wait_cap).
        const int shift = std::min(w.waits++, 10);
        w.next_try = Clock::now() + std::min<std::chrono::milliseconds>(o_.wait_cap, o_.poll * (1 << shift));
      }
    } else if (!stopping()) {
      ++w.d.failures;
      w.d.note = s.to_string();
      if (w.d.state == StepDurability::State::kUploading) w.d.state = StepDurability::State::kLocal;
      const int shift = std::min(w.d.failures - 1, 10);
      const auto wait = std::min<std::chrono::milliseconds>(o_.retry_cap, o_.retry_base * (1 << shift));
      w.next_try = Clock::now() + wait;
      log::warn("the durable copy of {}/{} in {}: {}; trying again in {} ms", key.first, key.second, where(),
                s.to_string(), wait.count());
    }
    set(key, w);
  }
}

Result<std::vector<std::vector<std::string>>> DurableTier::holders_of(const StepVersion& v) const {
  if (o_.holders) return o_.holders(v);
  return std::vector<std::vector<std::string>>(v.layout().shards().size(), std::vector<std::string>{o_.self});
}

Status DurableTier::advance(const Key& key, const std::shared_ptr<const StepVersion>& v, Work& w) {
  PTC_ASSIGN_OR_RETURN(const auto holders, holders_of(*v));
  const UploadPlan plan = plan_upload(v->layout(), holders, o_.self);
  const std::string dir = step_prefix(key.first, key.second);
  if (w.serial != v->serial()) {  // a new step, or repartitioned before its copy was whole
    if (w.upload_id) end_upload(key, w, true);
    w = Work{};
    take_left_upload(key, *v, w);
    w.serial = v->serial();
    w.d.version = v->version();
    for (const auto& sh : plan.shards) w.d.bytes_total += fs::shard_safetensors_view(v, sh)->size();
  }
  if (w.d.state == StepDurability::State::kLocal || w.d.state == StepDurability::State::kUploading) {
    if (!w.started) w.started = Clock::now();
    w.d.state = StepDurability::State::kUploading;
    w.d.bytes_done = 0;
    w.parts.clear();
    set(key, w);
    for (const auto& shard : plan.shards) {
      FilePart part;
      PTC_RETURN_IF_ERROR(upload(key, v, shard, w, part));
      PTC_RETURN_IF_ERROR(current(key, v));  // a record only for the step as it is
      part.written = std::time(nullptr);
      part.origin = v->origin();
      w.parts.back() = part;
      PTC_RETURN_IF_ERROR(s3_->put(dir + kPartsDir + part.name + ".json", transport::S3Body::of(to_json(part).dump())));
      if (stopping()) return unavailable("the daemon is stopping");
    }
    w.d.state = StepDurability::State::kWaiting;
    w.d.note.clear();
  }
  if (plan.commits) {
    bool done = false;
    PTC_RETURN_IF_ERROR(commit(key, v, w, done));
    return done ? mark_durable(key, *v, w) : Status::ok();
  }
  // Another node commits: durable once a copy whose manifest holds this node's files is in S3.
  PTC_ASSIGN_OR_RETURN(const auto head, s3_->head(dir + kPtcJson));
  std::string committer = holders.empty() || holders.front().empty() ? "?" : holders.front().front();
  if (head) {
    PTC_ASSIGN_OR_RETURN(const std::string text, s3_->get(dir + kManifest, kMaxSmallObject));
    PTC_ASSIGN_OR_RETURN(const formats::ExportManifest m,
                         formats::parse_export_manifest(text, s3_->where(dir + kManifest)));
    bool mine = m.version == v->version() && same_origin(m.origin, v->origin());
    for (const auto& p : w.parts) {
      const formats::ExportFile* f = m.find(p.name);
      mine = mine && f && f->size == p.size && f->xxh3 == p.xxh3;
    }
    if (mine) return mark_durable(key, *v, w);
  }
  w.d.note = "this node's files are written; node " + committer + " writes the copy's ptc.json once every file is";
  return Status::ok();
}

Status DurableTier::current(const Key& key, const std::shared_ptr<const StepVersion>& v) const {
  const auto snap = store_.snapshot();
  auto it = snap->steps.find(key);
  if (it == snap->steps.end() || it->second->serial() != v->serial())
    return unavailable(key.first + "/" + key.second + " changed while its copy was written (repartitioned or removed)");
  return Status::ok();
}

Result<FilePart> DurableTier::digest(const std::shared_ptr<const StepVersion>& v, const ptc::ShardId& shard) {
  auto view = fs::shard_safetensors_view(v, shard);
  FilePart p{rank_file(shard), view->size(), 0, v->version(), 0, v->origin()};
  Xxh3Stream h;
  std::string buf;
  for (uint64_t off = 0; off < p.size;) {
    const uint64_t n = std::min<uint64_t>(o_.part_bytes, p.size - off);
    fs::ReadBuffer rb;
    PTC_RETURN_IF_ERROR(view->read(off, n, rb), "reading " + p.name + " of " + v->job() + "/" + v->step());
    buf.resize(n);
    PTC_RETURN_IF_ERROR(rb.copy_to(reinterpret_cast<std::byte*>(buf.data())));
    h.update(buf.data(), n);
    off += n;
    if (stopping()) return unavailable("the daemon is stopping");
  }
  p.xxh3 = h.digest();
  return p;
}

Status DurableTier::upload(const Key& key, const std::shared_ptr<const StepVersion>& v, const ptc::ShardId& shard,
                           Work& w, FilePart& part) {
  const std::string dir = step_prefix(key.first, key.second);
  const std::string name = rank_file(shard);
  auto view = fs::shard_safetensors_view(v, shard);
  const uint64_t size = view->size();
  // Written already (an earlier try or run, or the copy this step was restored from): its part
  // record, or the copy's manifest, states these bytes (size and XXH3) for the object there.
  std::optional<uint64_t> stated;
  if (auto record = s3_->get(dir + kPartsDir + name + ".json", kMaxSmallObject)) {
    json j = json::parse(*record, nullptr, false);
    auto had = j.is_discarded() ? Result<FilePart>(invalid("")) : part_from_json(j, s3_->where(dir + kPartsDir + name));
    if (had && had->size == size) stated = had->xxh3;
  }
  if (!stated)
    if (auto text = s3_->get(dir + kManifest, kMaxSmallObject))
      if (auto m = formats::parse_export_manifest(*text, s3_->where(dir + kManifest)))
        if (const auto* f = m->find(name); f && f->size == size) stated = f->xxh3;
  if (stated) {
    PTC_ASSIGN_OR_RETURN(FilePart mine, digest(v, shard));
    auto obj = s3_->head(dir + name);
    if (mine.xxh3 == *stated && obj && *obj && (*obj)->size == size) {
      part = mine;
      w.parts.push_back(part);
      w.d.bytes_done += size;
      return Status::ok();
    }
  }
  part = FilePart{name, size, 0, v->version(), 0, v->origin()};
  Xxh3Stream h;
  std::string buf;
  auto read = [&](uint64_t off, uint64_t n) -> Status {
    fs::ReadBuffer rb;
    PTC_RETURN_IF_ERROR(view->read(off, n, rb), "reading " + name + " of " + key.first + "/" + key.second);
    buf.resize(n);
    PTC_RETURN_IF_ERROR(rb.copy_to(reinterpret_cast<std::byte*>(buf.data())));
    h.update(buf.data(), n);
    return Status::ok();
  };
  const uint64_t part_bytes = part_size();
  if (size <= part_bytes) {
    PTC_RETURN_IF_ERROR(read(0, size));
    PTC_RETURN_IF_ERROR(s3_->put(dir + name, transport::S3Body::of(buf)));
    w.d.bytes_done += size;
  } else {
    // Multipart, going on from the parts S3 holds when an earlier try of this file was cut short.
    std::map<int, transport::S3Part> have;
    if (w.upload_id && w.upload_file == name) {
      auto listed = s3_->list_parts(dir + name, *w.upload_id);
      if (listed) {
        for (const auto& p : *listed) have[p.number] = p;
        log::info("going on with the upload of {} to {}: {} of its parts are there", name, s3_->where(dir),
                  have.size());
      } else if (listed.status().code() == Code::kNotFound) {
        w.upload_id.reset();  // S3 forgot the upload (aborted, or expired): it starts again
      } else {
        return listed.status();  // S3 does not answer: the upload goes on once it does
      }
    } else if (w.upload_id) {
      end_upload(key, w, true);
    }
    if (!w.upload_id) {
      PTC_ASSIGN_OR_RETURN(std::string id, s3_->start_multipart(dir + name));
      w.upload_id = std::move(id);
      w.upload_file = name;
      if (Status kept = keep_upload(key, w, *v); !kept) {
        // Unrecorded, a crash would leave it open in the bucket: not used.
        (void)s3_->abort_multipart(dir + name, *w.upload_id);
        w.upload_id.reset();
        return kept;
      }
    }
    std::vector<transport::S3Part> parts;
    int number = 1;
    for (uint64_t off = 0; off < size; off += part_bytes, ++number) {
      const uint64_t n = std::min(part_bytes, size - off);
      PTC_RETURN_IF_ERROR(read(off, n));
      auto it = have.find(number);
      if (it != have.end() && it->second.size == n) {
        parts.push_back(it->second);
      } else {
        PTC_ASSIGN_OR_RETURN(std::string etag,
                             s3_->put_part(dir + name, *w.upload_id, number, transport::S3Body::of(buf)));
        parts.push_back(transport::S3Part{number, n, std::move(etag)});
        failpoint("s3.part.sent");
      }
      w.d.bytes_done += n;
      set(key, w);
      if (stopping()) return unavailable("the daemon is stopping");
      PTC_RETURN_IF_ERROR(current(key, v));
    }
    PTC_RETURN_IF_ERROR(s3_->complete_multipart(dir + name, *w.upload_id, parts));
    end_upload(key, w, false);
  }
  part.xxh3 = h.digest();
  w.parts.push_back(part);
  set(key, w);
  return Status::ok();
}

Status DurableTier::commit(const Key& key, const std::shared_ptr<const StepVersion>& v, Work& w, bool& done) {
  const std::string dir = step_prefix(key.first, key.second);
  PTC_RETURN_IF_ERROR(current(key, v));
  // The part records of this version (a record of another step once saved under this name, of the
  // same version number, has another origin: it does not count).
  const VersionId id = id_of(*v);
  PTC_ASSIGN_OR_RETURN(const auto records, s3_->list(dir + kPartsDir));
  std::vector<FilePart> parts;
  for (const auto& o : records) {
    PTC_ASSIGN_OR_RETURN(const std::string text, s3_->get(o.key, kMaxSmallObject));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) continue;  // cut short: its writer writes it again
    auto p = part_from_json(j, s3_->where(o.key));
    if (p && of_version(*p, id)) parts.push_back(std::move(p).value());
  }
  const auto missing = missing_parts(v->layout(), id, parts);
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    w.d.note = "waiting for the holders of " + names;
    return Status::ok();
  }
  std::set<std::string> wanted;
  for (const auto& s : v->layout().shards()) wanted.insert(rank_file(s));
  formats::ExportManifest m;
  m.version = v->version();
  m.origin = v->origin();
  for (const auto& p : parts)
    if (wanted.count(p.name)) m.files.push_back(p.entry());
  std::sort(m.files.begin(), m.files.end(),
            [](const formats::ExportFile& a, const formats::ExportFile& b) { return a.name < b.name; });
  const std::string ptc_text = ptc::ptc_to_json(v->layout().ptc());
  // A whole copy there already (a restart, or the copy this step was restored from): kept as it is
  // when its ptc.json and manifest state exactly these files.
  PTC_ASSIGN_OR_RETURN(const auto head, s3_->head(dir + kPtcJson));
  if (head) {
    auto there = s3_->get(dir + kPtcJson, kMaxSmallObject);
    auto text = s3_->get(dir + kManifest, kMaxSmallObject);
    auto had = text ? formats::parse_export_manifest(*text, s3_->where(dir + kManifest))
                    : Result<formats::ExportManifest>(text.status());
    if (there && *there == ptc_text && had && had->files == m.files) {
      // The same bytes cut from another version (a restore, a step saved again alike): only the
      // manifest's identity changes, which the other nodes wait for.
      if (had->version != m.version || had->origin != m.origin)
        PTC_RETURN_IF_ERROR(s3_->put(dir + kManifest, transport::S3Body::of(formats::export_manifest_text(m))));
      done = true;
      return Status::ok();
    }
    // Another copy: of this step at another layout, or of another step once saved under the name.
    // Taken back first (its ptc.json), so that it is never read as this step's.
    log::info("{} holds another copy than this step's files: writing it anew", s3_->where(dir));
    PTC_RETURN_IF_ERROR(s3_->remove(dir + kPtcJson));
  }
  // Rank files another layout left here go: the copy holds exactly its layout's files.
  PTC_ASSIGN_OR_RETURN(const auto objects, s3_->list(dir));
  for (const auto& o : objects) {
    if (o.key.find('/', dir.size()) != std::string::npos) continue;  // under .ptcfs-parts/
    const std::string name = o.key.substr(dir.size());
    if (name.size() > 12 && name.ends_with(".safetensors") && !wanted.count(name))
      PTC_RETURN_IF_ERROR(s3_->remove(o.key));
  }
  PTC_RETURN_IF_ERROR(s3_->put(dir + kManifest, transport::S3Body::of(formats::export_manifest_text(m))));
  PTC_RETURN_IF_ERROR(current(key, v));
  PTC_RETURN_IF_ERROR(s3_->put(dir + kPtcJson, transport::S3Body::of(ptc_text)));
  done = true;
  return Status::ok();
}

uint64_t DurableTier::part_size() const { return std::max(o_.part_bytes, kMinPart); }

Status DurableTier::keep_upload(const Key& key, const Work& w, const StepVersion& v) {
  WriteBatch b;
  b.put(upload_key(key.first, key.second), json{{"file", w.upload_file},
                                                {"upload_id", *w.upload_id},
                                                {"version", v.version()},
                                                {"origin", v.origin()},
                                                {"part_bytes", part_size()}}
                                               .dump());
  return store_.write_meta(b).with_context("recording the upload of " + w.upload_file);
}

void DurableTier::end_upload(const Key& key, Work& w, bool abort) {
  if (!w.upload_id) return;
  const std::string object = step_prefix(key.first, key.second) + w.upload_file;
  const std::string id = *w.upload_id;
  w.upload_id.reset();
  if (abort)
    if (Status s = s3_->abort_multipart(object, id); !s && s.code() != Code::kNotFound) {
      // Its record stays: the next run tries again (a lifecycle rule on the bucket is the backstop).
      log::warn("aborting the upload of {}: {}", s3_->where(object), s.to_string());
      return;
    }
  WriteBatch b;
  b.del(upload_key(key.first, key.second));
  if (Status s = store_.write_meta(b); !s) log::warn("forgetting the upload of {}: {}", object, s.to_string());
}

void DurableTier::take_left_upload(const Key& key, const StepVersion& v, Work& w) {
  auto it = left_.find(key);
  if (it == left_.end()) return;
  w.upload_id = it->second.upload_id;
  w.upload_file = it->second.file;
  // Only the same version (by origin: the same bytes), cut into the same parts, goes on where the
  // earlier run stopped.
  if (v.origin().empty() || it->second.origin != v.origin() || it->second.version != v.version() ||
      it->second.part_bytes != part_size())
    end_upload(key, w, true);
  else
    log::info("an upload of {} left by an earlier run goes on",
              s3_->where(step_prefix(key.first, key.second) + w.upload_file));
  left_.erase(it);
}

Status DurableTier::mark_durable(const Key& key, const StepVersion& v, Work& w) {
  WriteBatch b;
  b.put(Store::durable_key(key.first, key.second), json{{"version", w.d.version}, {"origin", v.origin()}}.dump());
  PTC_RETURN_IF_ERROR(store_.write_meta(b), "recording the durable copy");
  recorded_[key] = v.origin();
  if (w.started) {
    const double seconds = std::chrono::duration<double>(Clock::now() - *w.started).count();
    metrics::operation("s3_upload", true, seconds, w.d.bytes_done);
    log::info("{}/{} is durable in {} ({} bytes from this node in {:.1f} s)", key.first, key.second,
              s3_->where(step_prefix(key.first, key.second)), w.d.bytes_done, seconds);
  } else {
    log::info("{}/{} is durable in {} (its copy was there)", key.first, key.second,
              s3_->where(step_prefix(key.first, key.second)));
  }
  w.d.state = StepDurability::State::kDurable;
  w.d.note.clear();
  return Status::ok();
}

}  // namespace ptcfs::durable
