#include "daemon/durable/durable_tier.h"

#include <algorithm>

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
constexpr std::string_view kRecordPrefix = "durable/";
constexpr uint64_t kMaxSmallObject = 16 << 20;  // manifests, part records, ptc.json
constexpr uint64_t kMinPart = 5 << 20;          // S3's smallest part but the last
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

json to_json(const StepDurability& d) {
  json j{{"state", state_name(d.state)},
         {"version", d.version},
         {"bytes_uploaded", d.bytes_done},
         {"bytes_total", d.bytes_total}};
  if (!d.note.empty()) j["note"] = d.note;
  if (d.failures) j["failures"] = d.failures;
  return j;
}

std::string DurableTier::record_key(const std::string& job, const std::string& step) {
  return std::string(kRecordPrefix) + job + "/" + step;
}

DurableTier::DurableTier(Store& store, std::unique_ptr<transport::S3Client> s3, TierOptions o)
    : store_(store), s3_(std::move(s3)), o_(std::move(o)) {
  // The steps made durable before this run (a repartition since keeps them durable).
  auto s = store_.scan_meta(kRecordPrefix, [&](std::string_view key, std::string_view) {
    const std::string rest(key.substr(kRecordPrefix.size()));
    const size_t slash = rest.find('/');
    if (slash != std::string::npos) recorded_.insert({rest.substr(0, slash), rest.substr(slash + 1)});
    return Status::ok();
  });
  if (!s) log::warn("reading the durable records: {}", s.to_string());
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
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, o_.poll, [this] { return stop_ || wake_; });
    if (stop_) return;
    wake_ = false;
  }
}

void DurableTier::pass() {
  const auto snap = store_.snapshot();
  // Steps gone (removed): forget them, and their records.
  for (auto it = recorded_.begin(); it != recorded_.end();) {
    if (snap->steps.count(*it)) {
      ++it;
      continue;
    }
    WriteBatch b;
    b.del(record_key(it->first, it->second));
    if (auto s = store_.write_meta(b); !s)
      log::warn("forgetting the durable record of a removed step: {}", s.to_string());
    it = recorded_.erase(it);
  }
  for (auto it = work_.begin(); it != work_.end();) {
    if (snap->steps.count(it->first)) {
      ++it;
      continue;
    }
    if (it->second.upload_id)
      (void)s3_->abort_multipart(step_prefix(it->first.first, it->first.second) + it->second.upload_file,
                                 *it->second.upload_id);
    std::lock_guard lock(mu_);
    shown_.erase(it->first);
    it = work_.erase(it);
  }
  for (const auto& [key, v] : snap->steps) {
    if (stopping()) return;
    Work& w = work_[key];
    if (recorded_.count(key)) {
      if (w.d.state != StepDurability::State::kDurable) {
        w.d = StepDurability{};
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
  if (w.d.version != v->version()) {  // a new step, or repartitioned before its copy was whole
    if (w.upload_id) (void)s3_->abort_multipart(dir + w.upload_file, *w.upload_id);
    w = Work{};
    w.d.version = v->version();
    for (const auto& sh : plan.shards) w.d.bytes_total += fs::shard_safetensors_view(v, sh)->size();
  }
  if (!w.checked) {
    bool durable = false;
    PTC_RETURN_IF_ERROR(check_existing(key, v, plan, durable));
    if (durable) {
      w.checked = true;
      return mark_durable(key, w);
    }
    // Part records of other files may be another step's, once saved under this name: the node that
    // commits takes them back before it counts any (their writers write theirs again, below).
    if (plan.commits) PTC_RETURN_IF_ERROR(drop_parts_of_others(dir, plan));
    w.checked = true;
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
      PTC_RETURN_IF_ERROR(s3_->put(dir + kPartsDir + part.name + ".json", transport::S3Body::of(to_json(part).dump())));
      if (stopping()) return unavailable("the daemon is stopping");
    }
    w.d.state = StepDurability::State::kWaiting;
    w.d.note.clear();
  }
  if (plan.commits) {
    bool done = false;
    PTC_RETURN_IF_ERROR(commit(key, v, w, done));
    return done ? mark_durable(key, w) : Status::ok();
  }
  // Another node commits: durable once a copy whose manifest holds this node's files is in S3. This
  // node's part records stay there until then (the committing node may have taken them back).
  for (const auto& p : w.parts) {
    const std::string rec = dir + kPartsDir + p.name + ".json";
    PTC_ASSIGN_OR_RETURN(const auto there, s3_->head(rec));
    if (!there) PTC_RETURN_IF_ERROR(s3_->put(rec, transport::S3Body::of(to_json(p).dump())));
  }
  PTC_ASSIGN_OR_RETURN(const auto head, s3_->head(dir + kPtcJson));
  std::string committer = holders.empty() || holders.front().empty() ? "?" : holders.front().front();
  if (head) {
    PTC_ASSIGN_OR_RETURN(const std::string text, s3_->get(dir + kManifest, kMaxSmallObject));
    PTC_ASSIGN_OR_RETURN(const formats::ExportManifest m,
                         formats::parse_export_manifest(text, s3_->where(dir + kManifest)));
    bool mine = m.version == v->version();
    for (const auto& p : w.parts) {
      const formats::ExportFile* f = m.find(p.name);
      mine = mine && f && f->size == p.size && f->xxh3 == p.xxh3;
    }
    if (mine) return mark_durable(key, w);
  }
  w.d.note = "this node's files are written; node " + committer + " writes the copy's ptc.json once every file is";
  return Status::ok();
}

Status DurableTier::check_existing(const Key& key, const std::shared_ptr<const StepVersion>& v, const UploadPlan& plan,
                                   bool& durable) {
  const std::string dir = step_prefix(key.first, key.second);
  PTC_ASSIGN_OR_RETURN(const auto head, s3_->head(dir + kPtcJson));
  if (!head) return Status::ok();
  PTC_ASSIGN_OR_RETURN(const std::string ptc_text, s3_->get(dir + kPtcJson, kMaxSmallObject));
  if (ptc_text != ptc::ptc_to_json(v->layout().ptc())) {
    // A copy at another layout: the step repartitioned since (its tensors are the same).
    durable = true;
    return Status::ok();
  }
  PTC_ASSIGN_OR_RETURN(const std::string text, s3_->get(dir + kManifest, kMaxSmallObject));
  PTC_ASSIGN_OR_RETURN(const formats::ExportManifest m,
                       formats::parse_export_manifest(text, s3_->where(dir + kManifest)));
  bool same = true;
  for (const auto& shard : plan.shards) {
    PTC_ASSIGN_OR_RETURN(const FilePart mine, digest(v, shard));
    const formats::ExportFile* f = m.find(mine.name);
    same = same && f && f->size == mine.size && f->xxh3 == mine.xxh3;
    if (stopping()) return unavailable("the daemon is stopping");
  }
  if (same) {
    durable = true;
    return Status::ok();
  }
  // Another step's copy once saved under this name: it is not this step's. The committing node
  // takes it back (its ptc.json first), and the copy is written anew.
  log::warn("{} holds a copy whose files differ from this step's: writing the step anew", s3_->where(dir));
  if (plan.commits) PTC_RETURN_IF_ERROR(s3_->remove(dir + kPtcJson));
  return Status::ok();
}

Status DurableTier::drop_parts_of_others(const std::string& dir, const UploadPlan& plan) {
  std::set<std::string> mine;
  for (const auto& sh : plan.shards) mine.insert(rank_file(sh) + ".json");
  PTC_ASSIGN_OR_RETURN(const auto records, s3_->list(dir + kPartsDir));
  for (const auto& o : records)
    if (!mine.count(o.key.substr(o.key.rfind('/') + 1))) PTC_RETURN_IF_ERROR(s3_->remove(o.key));
  return Status::ok();
}

Result<FilePart> DurableTier::digest(const std::shared_ptr<const StepVersion>& v, const ptc::ShardId& shard) {
  auto view = fs::shard_safetensors_view(v, shard);
  FilePart p{rank_file(shard), view->size(), 0, v->version()};
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
  // Written already (an earlier try, or an earlier run): its part record states these bytes.
  auto record = s3_->get(dir + kPartsDir + name + ".json", kMaxSmallObject);
  if (record) {
    json j = json::parse(*record, nullptr, false);
    auto had = j.is_discarded() ? Result<FilePart>(invalid("")) : part_from_json(j, s3_->where(dir + kPartsDir + name));
    if (had && had->size == size) {
      PTC_ASSIGN_OR_RETURN(FilePart mine, digest(v, shard));
      auto obj = s3_->head(dir + name);
      if (mine.xxh3 == had->xxh3 && obj && *obj && (*obj)->size == size) {
        part = mine;
        w.parts.push_back(part);
        w.d.bytes_done += size;
        return Status::ok();
      }
    }
  }
  part = FilePart{name, size, 0, v->version()};
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
  const uint64_t part_bytes = std::max(o_.part_bytes, kMinPart);
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
      (void)s3_->abort_multipart(dir + w.upload_file, *w.upload_id);
      w.upload_id.reset();
    }
    if (!w.upload_id) {
      PTC_ASSIGN_OR_RETURN(std::string id, s3_->start_multipart(dir + name));
      w.upload_id = std::move(id);
      w.upload_file = name;
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
    }
    PTC_RETURN_IF_ERROR(s3_->complete_multipart(dir + name, *w.upload_id, parts));
    w.upload_id.reset();
  }
  part.xxh3 = h.digest();
  w.parts.push_back(part);
  set(key, w);
  return Status::ok();
}

Status DurableTier::commit(const Key& key, const std::shared_ptr<const StepVersion>& v, Work& w, bool& done) {
  const std::string dir = step_prefix(key.first, key.second);
  PTC_ASSIGN_OR_RETURN(const auto records, s3_->list(dir + kPartsDir));
  std::vector<FilePart> parts;
  for (const auto& o : records) {
    PTC_ASSIGN_OR_RETURN(const std::string text, s3_->get(o.key, kMaxSmallObject));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) continue;  // cut short: its writer writes it again
    auto p = part_from_json(j, s3_->where(o.key));
    if (p) parts.push_back(std::move(p).value());
  }
  const auto missing = missing_parts(v->layout(), v->version(), parts);
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    w.d.note = "waiting for the holders of " + names;
    return Status::ok();
  }
  // Rank files another layout left here go first: the copy holds exactly its layout's files.
  std::set<std::string> wanted;
  for (const auto& s : v->layout().shards()) wanted.insert(rank_file(s));
  PTC_ASSIGN_OR_RETURN(const auto objects, s3_->list(dir));
  for (const auto& o : objects) {
    if (o.key.find('/', dir.size()) != std::string::npos) continue;  // under .ptcfs-parts/
    const std::string name = o.key.substr(dir.size());
    if (name.size() > 12 && name.ends_with(".safetensors") && !wanted.count(name))
      PTC_RETURN_IF_ERROR(s3_->remove(o.key));
  }
  formats::ExportManifest m;
  m.version = v->version();
  for (const auto& p : parts)
    if (p.version == v->version() && wanted.count(p.name)) m.files.push_back(p.entry());
  std::sort(m.files.begin(), m.files.end(),
            [](const formats::ExportFile& a, const formats::ExportFile& b) { return a.name < b.name; });
  PTC_RETURN_IF_ERROR(s3_->put(dir + kManifest, transport::S3Body::of(formats::export_manifest_text(m))));
  PTC_RETURN_IF_ERROR(s3_->put(dir + kPtcJson, transport::S3Body::of(ptc::ptc_to_json(v->layout().ptc()))));
  done = true;
  return Status::ok();
}

Status DurableTier::mark_durable(const Key& key, Work& w) {
  WriteBatch b;
  b.put(record_key(key.first, key.second), json{{"version", w.d.version}}.dump());
  PTC_RETURN_IF_ERROR(store_.write_meta(b), "recording the durable copy");
  recorded_.insert(key);
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
