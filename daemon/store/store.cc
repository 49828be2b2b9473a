#include "daemon/store/store.h"

#include "daemon/store/failpoint.h"

#include <sys/stat.h>

#include <filesystem>

#include <cerrno>
#include <ctime>

#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "ptc/model.h"

namespace ptcfs {

Result<std::unique_ptr<Store>> Store::open(const std::string& data_dir, const RemoteSlices* remote,
                                           const RemoteSamples* samples, std::function<void()> changed) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) return error(Code::kIo, "creating data directory " + data_dir + ": " + ec.message());
  PTC_ASSIGN_OR_RETURN(auto kv, open_rocksdb(data_dir + "/meta"));
  PTC_ASSIGN_OR_RETURN(auto blobs, BlobStore::open(data_dir + "/blobs"));
  std::unique_ptr<Store> s(new Store(data_dir, std::move(kv), std::move(blobs), remote, samples, std::move(changed)));
  PTC_RETURN_IF_ERROR(s->load());
  // Blobs left by an interrupted import or repartition belong to no version.
  PTC_RETURN_IF_ERROR(s->collect_garbage().status());
  return s;
}

namespace {
struct Record {
  std::string job, name, value;
};

// The records under `prefix`, keyed "<prefix><job>/<name>".
Result<std::vector<Record>> scan_records(KvStore& kv, std::string_view prefix, const char* what) {
  std::vector<Record> out;
  PTC_RETURN_IF_ERROR(kv.scan(prefix, [&](std::string_view key, std::string_view value) -> Status {
    const std::string_view rest = key.substr(prefix.size());
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos)
      return corrupt(std::string("metadata: malformed ") + what + " key '" + std::string(rest) + "'");
    out.push_back({std::string(rest.substr(0, slash)), std::string(rest.substr(slash + 1)), std::string(value)});
    return Status::ok();
  }));
  return out;
}
}  // namespace

Status Store::load() {
  auto snap = std::make_shared<Snapshot>();
  PTC_ASSIGN_OR_RETURN(auto steps, scan_records(*kv_, StepVersion::kStepPrefix, "step"));
  for (const auto& r : steps) {
    PTC_ASSIGN_OR_RETURN(auto v, StepVersion::load(*kv_, r.job, r.name, r.value, blobs_.get(), remote_));
    snap->steps[{r.job, r.name}] = std::move(v);
  }
  PTC_ASSIGN_OR_RETURN(auto datasets, scan_records(*kv_, DatasetVersion::kPrefix, "dataset"));
  for (const auto& r : datasets) {
    PTC_ASSIGN_OR_RETURN(auto v, DatasetVersion::load(r.job, r.name, r.value, *blobs_, samples_));
    snap->datasets[{r.job, r.name}] = std::move(v);
  }
  // Blobs of prepared changes kept across a restart stay until their change is decided.
  size_t held = 0;
  PTC_RETURN_IF_ERROR(kv_->scan(kPreparedPrefix, [&](std::string_view key, std::string_view value) {
    auto j = parse_json(value, std::string(key));
    if (j && j->is_object() && j->contains("blobs") && (*j)["blobs"].is_array())
      for (const auto& b : (*j)["blobs"])
        if (b.is_number_unsigned()) {
          blobs_->hold_pending(b.get<uint64_t>());
          ++held;
        }
    return Status::ok();
  }));
  if (held) log::info("store {}: {} blobs of prepared changes kept until they are decided", data_dir_, held);
  std::lock_guard lock(mu_);
  snap_ = std::move(snap);
  log::info("store {}: {} steps and {} datasets loaded", data_dir_, snap_->steps.size(), snap_->datasets.size());
  return Status::ok();
}

std::shared_ptr<const Snapshot> Store::snapshot() const {
  std::lock_guard lock(mu_);
  return snap_;
}

std::shared_ptr<const StepVersion> Store::find_version(const std::string& job, const std::string& step,
                                                       uint64_t version) const {
  std::lock_guard lock(mu_);
  auto it = snap_->steps.find({job, step});
  if (it != snap_->steps.end() && it->second->version() == version) return it->second;
  for (const auto& w : retired_)
    if (auto v = w.lock(); v && v->job() == job && v->step() == step && v->version() == version) return v;
  return nullptr;
}

Claim& Claim::operator=(Claim&& o) noexcept {
  if (this != &o) {
    release();
    store_ = std::exchange(o.store_, nullptr);
    kind_ = o.kind_;
    job_ = std::move(o.job_);
    name_ = std::move(o.name_);
  }
  return *this;
}

void Claim::release() {
  if (Store* s = std::exchange(store_, nullptr)) s->release(kind_, job_, name_);
}

Status Store::check_new_step(const std::string& job, const std::string& step) {
  PTC_RETURN_IF_ERROR(ptc::validate_id("job", job));
  PTC_RETURN_IF_ERROR(ptc::validate_id("step", step));
  if (step == "data") return invalid("step name 'data' is reserved: MNT/<job>/data holds the job's datasets");
  return Status::ok();
}

Result<Claim> Store::claim(Claim::Kind kind, const std::string& job, const std::string& name) {
  if (kind == Claim::kNewStep) PTC_RETURN_IF_ERROR(check_new_step(job, name));
  std::lock_guard lock(mu_);
  const std::string what = job + "/" + name;
  switch (kind) {
    case Claim::kNewStep:
      if (snap_->steps.count({job, name})) return error(Code::kAlreadyExists, "step " + what + " already exists");
      if (claimed_.count({kind, job, name})) return error(Code::kAlreadyExists, "step " + what + " is being imported");
      break;
    case Claim::kChangeStep:
      if (claimed_.count({kind, job, name}))
        return error(Code::kFailedPrecondition, "step " + what + " is already being repartitioned");
      break;
    case Claim::kNewDataset:
      if (snap_->datasets.count({job, name})) return error(Code::kAlreadyExists, "dataset " + what + " already exists");
      if (claimed_.count({kind, job, name})) return error(Code::kAlreadyExists, "dataset " + what + " is being added");
      break;
    case Claim::kChangeDataset:
      if (claimed_.count({kind, job, name}))
        return error(Code::kFailedPrecondition,
                     "dataset " + what + " is already being changed (a progress or a re-split is prepared)");
      break;
  }
  claimed_.emplace(kind, job, name);
  return Claim(this, kind, job, name);
}

void Store::release(Claim::Kind kind, const std::string& job, const std::string& name) {
  std::lock_guard lock(mu_);
  claimed_.erase({kind, job, name});
}

std::shared_ptr<StepVersion> Store::new_version(std::string job, std::string step, uint64_t version, ptc::Layout layout,
                                                std::vector<std::vector<StoredSlice>> stored, StepPlacement placement) {
  return std::make_shared<StepVersion>(std::move(job), std::move(step), version, static_cast<int64_t>(::time(nullptr)),
                                       std::move(layout), std::move(stored), blobs_.get(), std::move(placement),
                                       remote_);
}

std::string Store::durable_key(const std::string& job, const std::string& step) {
  return "durable/" + job + "/" + step;
}

std::string Store::durable_origin(const std::string& job, const std::string& step, const char* member) {
  auto text = read_meta(durable_key(job, step));
  if (!text) log::warn("reading the durable record of {}/{}: {}", job, step, text.status().to_string());
  if (!text || !*text) return "";
  const nlohmann::json j = nlohmann::json::parse(**text, nullptr, false);
  return j.is_object() && j.contains(member) && j[member].is_string() ? j[member].get<std::string>() : "";
}

Status Store::remove_step(std::shared_ptr<const StepVersion> current) {
  std::lock_guard commit_lock(commit_mu_);
  const std::string job = current->job(), step = current->step();
  {
    std::lock_guard lock(mu_);
    auto it = snap_->steps.find({job, step});
    if (it == snap_->steps.end() || it->second != current)
      return error(Code::kFailedPrecondition, "step " + job + "/" + step + " changed meanwhile");
  }
  WriteBatch batch;
  current->delete_slice_records(batch);
  batch.del(StepVersion::meta_key(job, step));
  batch.del(durable_key(job, step));  // a step saved later under this name is another step
  PTC_RETURN_IF_ERROR(kv_->write(batch));
  {
    std::lock_guard lock(mu_);
    auto next = std::make_shared<Snapshot>(*snap_);
    next->steps.erase({job, step});
    snap_ = std::move(next);
    retired_.push_back(current);  // open files keep reading it; its blobs go when they close
  }
  changed();
  return Status::ok();
}

Status Store::commit(std::shared_ptr<const StepVersion> v, std::shared_ptr<const StepVersion> replaced,
                     const std::vector<DatasetChange>& datasets) {
  std::lock_guard commit_lock(commit_mu_);
  {
    std::lock_guard lock(mu_);
    if (v) {
      auto it = snap_->steps.find({v->job(), v->step()});
      const StepVersion* current = it == snap_->steps.end() ? nullptr : it->second.get();
      if (current != replaced.get())
        return error(Code::kFailedPrecondition,
                     "step " + v->job() + "/" + v->step() + " changed while the new version was prepared");
    }
    for (const auto& d : datasets) {
      auto it = snap_->datasets.find({d.next->job(), d.next->name()});
      const DatasetVersion* current = it == snap_->datasets.end() ? nullptr : it->second.get();
      if (current != d.replaced.get())
        return error(Code::kFailedPrecondition,
                     "dataset " + d.next->job() + "/" + d.next->name() + " changed while its new version was prepared");
    }
  }
  WriteBatch batch;
  if (replaced) replaced->delete_slice_records(batch);
  if (v) v->to_records(batch);
  for (const auto& d : datasets) d.next->to_records(batch);
  PTC_RETURN_IF_ERROR(kv_->write(batch));
  failpoint("commit.written");
  if (v)
    for (uint64_t id : v->blobs_used()) blobs_->settle(id);
  for (const auto& d : datasets)
    for (uint64_t id : d.next->blobs_used()) blobs_->settle(id);
  {
    std::lock_guard lock(mu_);
    auto next = std::make_shared<Snapshot>(*snap_);
    if (v) next->steps[{v->job(), v->step()}] = std::move(v);
    for (const auto& d : datasets) {
      next->datasets[{d.next->job(), d.next->name()}] = d.next;
      if (d.replaced) retired_datasets_.push_back(d.replaced);
    }
    snap_ = std::move(next);
    if (replaced) retired_.push_back(replaced);
  }
  changed();
  return Status::ok();
}

Result<size_t> Store::collect_garbage() {
  // Under the commit lock, no blob can move from pending to referenced meanwhile.
  std::lock_guard commit_lock(commit_mu_);
  std::set<uint64_t> used;
  {
    std::lock_guard lock(mu_);
    for (const auto& [_, v] : snap_->steps)
      for (uint64_t b : v->blobs_used()) used.insert(b);
    std::vector<std::weak_ptr<const StepVersion>> alive;
    for (auto& w : retired_)
      if (auto v = w.lock()) {
        for (uint64_t b : v->blobs_used()) used.insert(b);
        alive.push_back(w);
      }
    retired_ = std::move(alive);
    for (const auto& [_, d] : snap_->datasets)
      for (uint64_t b : d->blobs_used()) used.insert(b);
    std::vector<std::weak_ptr<const DatasetVersion>> alive_datasets;
    for (auto& w : retired_datasets_)
      if (auto d = w.lock()) {
        for (uint64_t b : d->blobs_used()) used.insert(b);
        alive_datasets.push_back(w);
      }
    retired_datasets_ = std::move(alive_datasets);
  }
  PTC_ASSIGN_OR_RETURN(auto all, blobs_->list());
  size_t removed = 0;
  for (uint64_t id : all) {
    if (used.count(id) || blobs_->is_pending(id)) continue;
    PTC_RETURN_IF_ERROR(blobs_->remove(id));
    ++removed;
  }
  if (removed) log::info("removed {} blobs that no version uses any more", removed);
  return removed;
}

std::set<uint64_t> Store::pinned_blobs() const {
  std::set<uint64_t> out;
  std::lock_guard lock(mu_);
  for (const auto& w : retired_)
    if (auto v = w.lock())
      for (uint64_t b : v->blobs_used()) out.insert(b);
  for (const auto& [_, d] : snap_->datasets)
    for (uint64_t b : d->blobs_used()) out.insert(b);
  for (const auto& w : retired_datasets_)
    if (auto d = w.lock())
      for (uint64_t b : d->blobs_used()) out.insert(b);
  return out;
}

fs::Contents mount_contents(const Store& store) {
  fs::Contents c;
  const auto snap = store.snapshot();
  for (const auto& [key, v] : snap->steps) c.steps.push_back({key.first, key.second, v});
  for (const auto& [key, v] : snap->datasets) c.datasets.push_back({key.first, key.second, v});
  return c;
}

}  // namespace ptcfs
