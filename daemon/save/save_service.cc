#include "daemon/save/save_service.h"

#include <chrono>
#include <ctime>
#include <thread>

#include "daemon/save/hf_save.h"
#include "daemon/save/staged_file.h"
#include "daemon/store/checksum.h"
#include "daemon/store/prepared.h"
#include "ptc/base/log.h"
#include "ptc/formats/rank_file.h"
#include "ptc/model.h"

namespace ptcfs {

namespace {

// What a path inside a step's folder is: ptc.json, a shard file or a tensor of a shard.
struct FileKind {
  PendingFile::Kind kind = PendingFile::Kind::kPtcJson;
  ptc::ShardId shard;
  std::string tensor;
};

const char* kLayoutHint =
    " (a step holds ptc.json, tp{t}-pp{p}.safetensors and tp{t}-pp{p}/<tensor>.npy, or a stock DCP save's "
    "<name>.distcp files and .metadata.tmp)";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status check_components(const std::string& where, const std::string& rel) {
  size_t pos = 0;
  while (pos <= rel.size()) {
    size_t slash = rel.find('/', pos);
    if (slash == std::string::npos) slash = rel.size();
    const std::string c = rel.substr(pos, slash - pos);
    if (c.empty() || c == "." || c == ".." || c.size() > 250)
      return invalid(where + ": bad path component '" + c + "'");
    pos = slash + 1;
  }
  return Status::ok();
}

bool is_dcp_file(const std::string& rel) {
  return rel.find('/') == std::string::npos && (rel == kDcpMetadataTmp || ends_with(rel, ".distcp"));
}

// A name a stock DCP save uses that ptcfs does not take, and why.
std::optional<std::string> refused_dcp_name(const std::string& rel) {
  if (rel == kDcpMetadata)
    return std::string(
        " is written by renaming .metadata.tmp once every .distcp file is (as torch's "
        "FileSystemWriter does); to bring in a DCP folder, use ptcfs import DIR --format dcp");
  if (rel.find('/') == std::string::npos && ends_with(rel, ".metadata.tmp"))
    return std::string(
        ": a DCP save without collectives (one .metadata per rank) is not supported: save with "
        "use_collectives=True (the default)");
  return std::nullopt;
}

Result<FileKind> classify(const std::string& where, const std::string& rel) {
  PTC_RETURN_IF_ERROR(check_components(where, rel));
  if (auto why = refused_dcp_name(rel)) return invalid(where + *why);
  FileKind k;
  if (rel == "ptc.json") return k;
  const size_t slash = rel.find('/');
  if (slash == std::string::npos) {
    if (ends_with(rel, ".safetensors")) {
      auto id = ptc::parse_shard_name(rel.substr(0, rel.size() - 12));
      if (id) {
        k.kind = PendingFile::Kind::kShard;
        k.shard = *id;
        return k;
      }
    }
    return invalid(where + ": unexpected file" + kLayoutHint);
  }
  auto id = ptc::parse_shard_name(rel.substr(0, slash));
  if (!id || !ends_with(rel, ".npy") || rel.size() <= slash + 1 + 4)
    return invalid(where + ": unexpected file" + kLayoutHint);
  k.kind = PendingFile::Kind::kTensor;
  k.shard = *id;
  k.tensor = rel.substr(slash + 1, rel.size() - slash - 1 - 4);
  return k;
}

}  // namespace

SaveService::SaveService(Store& store, std::function<void()> wake, std::function<void()> changed)
    : store_(store), wake_(std::move(wake)), changed_(std::move(changed)) {}

SaveService::~SaveService() {
  std::lock_guard lock(mu_);
  for (auto& [key, s] : steps_) s->release_name();
}

void SaveService::changed() {
  if (changed_) changed_();
}

std::shared_ptr<PendingStep> SaveService::find(const std::string& job, const std::string& step) const {
  std::lock_guard lock(mu_);
  auto it = steps_.find({job, step});
  return it == steps_.end() ? nullptr : it->second;
}

Status SaveService::make_job(const std::string& job) {
  PTC_RETURN_IF_ERROR(ptc::validate_id("job", job));
  auto snap = store_.snapshot();
  std::lock_guard lock(mu_);
  bool exists = jobs_.count(job) > 0;
  for (const auto& [key, _] : snap->steps) exists = exists || key.first == job;
  for (const auto& [key, _] : snap->datasets) exists = exists || key.first == job;
  for (const auto& [key, _] : steps_) exists = exists || key.first == job;
  if (exists) return error(Code::kAlreadyExists, "job '" + job + "' exists");
  jobs_.insert(job);
  log::info("made job {}", job);
  return Status::ok();
}

Status SaveService::make_step(const std::string& job, const std::string& step) {
  PTC_ASSIGN_OR_RETURN(Claim name,
                       store_.claim(Claim::kNewStep, job, step));  // kAlreadyExists when committed or being made
  auto s = std::make_shared<PendingStep>(job, step, static_cast<int64_t>(::time(nullptr)), std::move(name));
  s->blobs = &store_.blobs();
  s->on_closed = [this](const std::shared_ptr<PendingStep>& st) { closed(st); };
  std::lock_guard lock(mu_);
  steps_[{job, step}] = std::move(s);
  jobs_.insert(job);
  log::info("saving {}/{}: pending", job, step);
  return Status::ok();
}

Status SaveService::make_dir(const std::string& job, const std::string& step, const std::string& rel) {
  const std::string where = job + "/" + step + "/" + rel;
  auto s = find(job, step);
  if (!s) return error(Code::kPermissionDenied, job + "/" + step + " is not being saved");
  PTC_RETURN_IF_ERROR(check_components(where, rel));
  const std::string first = rel.substr(0, rel.find('/'));
  if (!ptc::parse_shard_name(first))
    return invalid(where + ": unexpected folder (a step's folders are its shards, tp{t}-pp{p})");
  MutexLock lock(s->mu);
  if (s->committing || s->removed) return error(Code::kPermissionDenied, s->name() + " is no longer pending");
  if (s->files.count(first + ".safetensors"))
    return invalid(where + ": shard " + first + " is being written as a safetensors file, not per tensor");
  for (size_t at = 0; at != std::string::npos;) {
    at = rel.find('/', at + 1);
    if (!s->dirs.insert(rel.substr(0, at)).second && at == std::string::npos)
      return error(Code::kAlreadyExists, where + " exists");
  }
  s->stamp = std::make_shared<int>(0);
  return Status::ok();
}

Result<std::shared_ptr<fs::WriteFile>> SaveService::create(const std::string& job, const std::string& step,
                                                           const std::string& rel) {
  const std::string where = job + "/" + step + "/" + rel;
  auto s = find(job, step);
  if (!s) return error(Code::kPermissionDenied, job + "/" + step + " is not being saved");
  if (is_dcp_file(rel) || is_hf_save_file(rel)) return create_staged(s, rel, where);
  PTC_ASSIGN_OR_RETURN(FileKind k, classify(where, rel));
  std::shared_ptr<BlobWriter> blob;  // a tensor file gets its blob once its header says how large it is
  if (k.kind == PendingFile::Kind::kShard) {
    PTC_ASSIGN_OR_RETURN(BlobWriter w, store_.blobs().create());
    blob = std::make_shared<BlobWriter>(std::move(w));
  }
  MutexLock lock(s->mu);
  if (s->committing || s->removed) return error(Code::kPermissionDenied, s->name() + " is no longer pending");
  if (s->files.count(rel)) return error(Code::kAlreadyExists, where + " exists");
  if (!s->staged.empty() && !s->converting)
    return invalid(where + ": " + s->name() + " is being written by a stock DCP save (" + s->staged.begin()->first +
                   "), not as ptcfs files");
  const std::string shard_file = k.shard.name() + ".safetensors";
  if (k.kind == PendingFile::Kind::kTensor && s->files.count(shard_file))
    return invalid(where + ": shard " + k.shard.name() + " is being written as " + shard_file + ", not per tensor");
  if (k.kind == PendingFile::Kind::kShard) {
    const std::string prefix = k.shard.name() + "/";
    for (const auto& [other, f] : s->files)
      if (other.compare(0, prefix.size(), prefix) == 0)
        return invalid(where + ": shard " + k.shard.name() + " is being written per tensor (" + other + ")");
  }
  // A tensor's folders come with it (cp -r makes them first; a writer may not).
  if (k.kind == PendingFile::Kind::kTensor)
    for (size_t at = rel.find('/'); at != std::string::npos; at = rel.find('/', at + 1))
      s->dirs.insert(rel.substr(0, at));
  auto f = std::make_shared<PendingFile>(s, k.kind, rel, k.shard, k.tensor, std::move(blob));  // not open yet
  if (auto st = s->check(*f); !st) return st;  // a shard or tensor the known layout does not have
  s->files[rel] = f;
  s->note(*f);
  s->stamp = std::make_shared<int>(0);
  return std::shared_ptr<fs::WriteFile>(f);
}

Result<std::shared_ptr<fs::WriteFile>> SaveService::create_staged(const std::shared_ptr<PendingStep>& s,
                                                                  const std::string& rel, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_components(where, rel));
  const bool hf = is_hf_save_file(rel);
  std::shared_ptr<BlobWriter> blob;  // the metadata and save_pretrained's JSON files are kept in memory
  if (hf ? is_hf_data_file(rel) : rel != kDcpMetadataTmp) {
    PTC_ASSIGN_OR_RETURN(BlobWriter w, store_.blobs().create());
    blob = std::make_shared<BlobWriter>(std::move(w));
  }
  MutexLock lock(s->mu);
  if (s->committing || s->removed || s->converting)
    return error(Code::kPermissionDenied, s->name() + " is no longer pending");
  if (s->staged.count(rel)) return error(Code::kAlreadyExists, where + " exists");
  if (!s->files.empty())
    return invalid(where + ": " + s->name() + " is being written as ptcfs files (" + s->files.begin()->first +
                   "), not by a stock " + (hf ? "save_pretrained" : "DCP save"));
  for (const auto& [other, f] : s->staged)
    if (is_hf_save_file(other) != hf)
      return invalid(where + ": " + s->name() + " is being written by a stock " +
                     (hf ? "DCP save (" : "save_pretrained (") + other + ")");
  auto f = std::make_shared<StagedFile>(where, std::move(blob));
  if (hf)  // the close of a save's last file converts it (daemon/save/hf_save.h)
    f->on_close([this, w = std::weak_ptr<PendingStep>(s)] {
      auto step = w.lock();
      return step ? hf_closed(step) : Status::ok();
    });
  s->staged[rel] = f;
  s->stamp = std::make_shared<int>(0);
  return std::shared_ptr<fs::WriteFile>(f);
}

Status SaveService::unlink(const std::string& job, const std::string& step, const std::string& rel) {
  auto s = find(job, step);
  if (!s) return error(Code::kPermissionDenied, job + "/" + step + " is not being saved");
  MutexLock lock(s->mu);
  if (s->committing) return error(Code::kPermissionDenied, s->name() + " is committing");
  if (auto st = s->staged.find(rel); st != s->staged.end()) {
    if (s->converting) return error(Code::kPermissionDenied, s->name() + " is being converted");
    st->second->kill();
    s->staged.erase(st);
    s->stamp = std::make_shared<int>(0);
    return Status::ok();
  }
  auto it = s->files.find(rel);
  if (it == s->files.end()) return not_found(s->name() + "/" + rel + " does not exist");
  mine(*s, *it->second);
  it->second->dead = true;  // its blob goes with the last handle
  s->note(*it->second);
  s->files.erase(it);
  if (rel == "ptc.json") {
    s->layout.reset();
    s->ptc_text.clear();
    s->recount();
  }
  s->stamp = std::make_shared<int>(0);
  return Status::ok();
}

void SaveService::add_to(fs::Contents& c) const {
  std::vector<std::shared_ptr<PendingStep>> steps;
  {
    std::lock_guard lock(mu_);
    c.jobs.insert(c.jobs.end(), jobs_.begin(), jobs_.end());
    for (const auto& [_, s] : steps_) steps.push_back(s);
  }
  auto snap = store_.snapshot();
  for (const auto& s : steps) {
    if (snap->steps.count({s->job, s->step})) continue;  // committed: the store shows it
    fs::PendingEntry e;
    e.job = s->job;
    e.step = s->step;
    e.mtime = s->created;
    MutexLock lock(s->mu);
    if (s->removed) continue;
    e.stamp = s->stamp;
    e.dirs.assign(s->dirs.begin(), s->dirs.end());
    for (const auto& [rel, f] : s->files) e.files.emplace_back(rel, f);
    for (const auto& [rel, f] : s->staged) e.files.emplace_back(rel, f);
    c.pending.push_back(std::move(e));
  }
}

std::optional<SaveService::Progress> SaveService::progress(const std::string& job, const std::string& step) const {
  auto s = find(job, step);
  if (!s) return std::nullopt;
  MutexLock lock(s->mu);
  Progress p{s->job, s->step, s->bytes_written(), s->bytes_total(), s->files.size(), {}};
  for (const auto& [rel, f] : s->files) {
    mine(*s, *f);
    if (!f->check.error.empty()) p.errors.push_back(f->check.error);
  }
  if (!s->failure.empty()) p.errors.push_back(s->failure);
  return p;
}

std::vector<SaveService::Progress> SaveService::pending() const {
  std::vector<std::pair<std::string, std::string>> keys;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, _] : steps_) keys.push_back(key);
  }
  std::vector<Progress> out;
  for (const auto& [job, step] : keys)
    if (auto p = progress(job, step)) out.push_back(std::move(*p));
  return out;
}

std::vector<std::string> SaveService::jobs() const {
  std::lock_guard lock(mu_);
  return {jobs_.begin(), jobs_.end()};
}

Status SaveService::remove(const std::string& job, const std::string& step) {
  std::shared_ptr<PendingStep> s;
  std::set<uint64_t> sealed_blobs;
  {
    std::lock_guard lock(mu_);
    auto it = steps_.find({job, step});
    if (it == steps_.end()) return not_found("no step " + job + "/" + step + " is being saved");
    s = it->second;
    {
      MutexLock slock(s->mu);
      if (s->committing) return error(Code::kFailedPrecondition, s->name() + " is committing");
      s->removed = true;
      // Finished blobs (a commit tried and aborted) stay when their writers go: remove them.
      for (auto& [rel, f] : s->files) {
        mine(*s, *f);
        if (s->sealed && f->place.blob && f->place.blob->finished()) sealed_blobs.insert(f->place.blob->id());
        f->dead = true;
      }
      for (auto& [rel, f] : s->staged) f->kill();
      s->files.clear();
      s->staged.clear();
    }
    steps_.erase(it);
  }
  s->release_name();
  for (uint64_t id : sealed_blobs) {
    if (auto st = store_.blobs().remove(id); !st) log::warn("removing a blob of {}/{}: {}", job, step, st.to_string());
    store_.blobs().settle(id);
  }
  log::info("removed pending step {}/{}", job, step);
  changed();
  return Status::ok();
}

bool SaveService::ready(const PendingStep& step) const {
  // This node's part is complete: the runner looks at the whole (one node commits a complete
  // step; on a cluster the deciding node looks at every node's part).
  return step.part_complete();
}

void SaveService::closed(const std::shared_ptr<PendingStep>& step) {
  {
    MutexLock slock(step->mu);
    if (!ready(*step)) return;
  }
  note_ready(step->job, step->step);
}

void SaveService::note_ready(const std::string& job, const std::string& step) {
  {
    std::lock_guard lock(mu_);
    ready_.emplace(job, step);
  }
  if (wake_) wake_();
}

std::vector<std::pair<std::string, std::string>> SaveService::take_ready() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, std::string>> out(ready_.begin(), ready_.end());
  ready_.clear();
  return out;
}

}  // namespace ptcfs
