#include "daemon/dataset/dataset_ops.h"

#include <chrono>
#include <ctime>

#include "daemon/store/checksum.h"
#include "daemon/store/file_util.h"
#include "fs/dataset_views.h"
#include "ptc/base/log.h"
#include "ptc/formats/mmidx.h"

namespace ptcfs {

using nlohmann::json;

namespace {

constexpr size_t kCopyChunk = 8 << 20;

// Copies a source file into a new pending blob; checks it did not change meanwhile.
Result<uint64_t> copy_into_blob(Store& store, const SourceFile& f, std::vector<uint64_t>& blobs) {
  PTC_ASSIGN_OR_RETURN(File in, File::open_read(f.path));
  PTC_ASSIGN_OR_RETURN(BlobWriter w, store.blobs().create());
  blobs.push_back(w.id());
  std::string buf(kCopyChunk, '\0');
  for (uint64_t pos = 0; pos < f.size;) {
    PTC_ASSIGN_OR_RETURN(size_t got, in.read_at(pos, buf.data(), std::min<uint64_t>(kCopyChunk, f.size - pos)));
    if (got == 0) return corrupt(f.path + ": changed while it was copied");
    PTC_RETURN_IF_ERROR(w.append(buf.data(), got));
    pos += got;
  }
  PTC_ASSIGN_OR_RETURN(int64_t mtime, in.mtime_ns());
  if (mtime != f.mtime_ns) return corrupt(f.path + ": changed while it was copied");
  PTC_RETURN_IF_ERROR(w.finish());
  return w.id();
}

Result<uint64_t> write_table(Store& store, const std::vector<SampleRecord>& samples, std::vector<uint64_t>& blobs) {
  PTC_ASSIGN_OR_RETURN(BlobWriter w, store.blobs().create());
  blobs.push_back(w.id());
  PTC_RETURN_IF_ERROR(w.append(samples.data(), samples.size() * sizeof(SampleRecord)));
  PTC_RETURN_IF_ERROR(w.finish());
  return w.id();
}

}  // namespace

Result<int> job_dp(const Store& store, const std::string& job) {
  auto snap = store.snapshot();
  int dp = 0;
  std::string first;
  for (const auto& [key, v] : snap->steps) {
    if (key.first != job) continue;
    const int d = v->layout().parallelism().dp;
    if (dp == 0) {
      dp = d;
      first = key.second;
    } else if (d != dp) {
      return error(Code::kFailedPrecondition, "steps of job '" + job + "' differ in dp (" + first + ": " +
                                                  std::to_string(dp) + ", " + key.second + ": " + std::to_string(d) +
                                                  "); give --dp");
    }
  }
  if (dp == 0)
    return error(Code::kFailedPrecondition, "job '" + job + "' has no checkpoint step to take dp from; give --dp");
  return dp;
}

Result<std::shared_ptr<const DatasetVersion>> current_dataset(const Store& store, const std::string& job,
                                                              const std::string& name) {
  auto snap = store.snapshot();
  auto it = snap->datasets.find({job, name});
  if (it != snap->datasets.end()) return std::shared_ptr<const DatasetVersion>(it->second);
  return not_found("job '" + job + "' has no dataset '" + name + "'");
}

Result<PreparedChange> prepare_dataset_add(Store& store, const DatasetAddRequest& req, int dp, const std::string& home,
                                           DatasetAddSummary& summary, const IndexProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string name = req.job + "/" + req.name;
  PTC_ASSIGN_OR_RETURN(DatasetIndex index, index_dataset(req.format, req.files, progress));
  ptc::DatasetSpec spec;
  spec.format = req.format;
  spec.seed = req.seed;
  spec.global_batch = req.global_batch;
  spec.num_samples = index.samples.size();
  if (auto s = ptc::check_spec(spec); !s) return s.with_context("dataset " + name);
  ptc::DatasetPosition pos;
  pos.dp = dp;
  if (auto s = ptc::check_dp(spec, dp); !s) return s.with_context("dataset " + name);

  // On error the change aborts itself: its blobs go and the name is free again.
  PreparedChange change(store);
  PTC_RETURN_IF_ERROR(change.claim(store, Claim::kNewDataset, req.job, req.name));
  uint64_t copied = 0, bytes = 0;
  for (auto& f : index.files) {
    bytes += f.size;
    if (!req.copy) continue;
    PTC_ASSIGN_OR_RETURN(f.blob, copy_into_blob(store, f, change.blobs));
    copied += f.size;
  }
  PTC_ASSIGN_OR_RETURN(const uint64_t table, write_table(store, index.samples, change.blobs));
  const uint64_t digest = xxh3_of(index.samples.data(), index.samples.size() * sizeof(SampleRecord));
  PTC_ASSIGN_OR_RETURN(auto source, DatasetSource::open(store.blobs(), table, digest, index.files, spec.num_samples,
                                                        is_local_home(home, store.remote_samples())));
  auto next = std::make_shared<DatasetVersion>(req.job, req.name, 1, static_cast<int64_t>(::time(nullptr)), spec,
                                               index.dtype_code, pos, std::move(source), home, store.remote_samples());
  change.datasets.push_back({next, nullptr});
  summary.bytes = bytes;
  summary.bytes_copied = copied;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return change;
}

Result<PreparedChange> prepare_dataset_copy(Store& store, const std::string& job, const std::string& name,
                                            const json& record, uint64_t table) {
  json local = record;
  local["table"] = table;
  for (auto& f : local["files"]) f["blob"] = 0;  // the home's copies stay on the home
  PreparedChange change(store);                  // on error it aborts itself: the table goes
  change.blobs.push_back(table);
  PTC_ASSIGN_OR_RETURN(auto v, DatasetVersion::load(job, name, local.dump(), store.blobs(), store.remote_samples()));
  if (v->source().local()) return internal("a copied dataset record names this node as its home");
  PTC_RETURN_IF_ERROR(change.claim(store, Claim::kNewDataset, job, name));
  change.datasets.push_back({std::move(v), nullptr});
  return change;
}

Result<PreparedChange> prepare_dataset_progress(const Store& store, const std::string& job, const std::string& name,
                                                std::optional<uint64_t> epoch, uint64_t consumed,
                                                std::optional<uint64_t> from_version, int dp, uint64_t global_batch,
                                                std::optional<uint64_t> batch_offset) {
  PTC_ASSIGN_OR_RETURN(auto cur, current_dataset(store, job, name));
  const std::string what = "dataset " + job + "/" + name;
  if (from_version && cur->version() != *from_version)
    return error(Code::kFailedPrecondition, "dataset " + job + "/" + name + " is at version " +
                                                std::to_string(cur->version()) + ", not " +
                                                std::to_string(*from_version));
  if (batch_offset) {
    if (!epoch || !global_batch)
      return invalid(what + ": a batch_offset is set together with its epoch and global batch");
    ptc::DatasetSpec spec = cur->spec();
    spec.global_batch = global_batch;
    PTC_RETURN_IF_ERROR(ptc::check_spec(spec).with_context(what));
    const ptc::DatasetPosition at{dp ? dp : cur->position().dp, *epoch, *batch_offset, *batch_offset};
    PTC_RETURN_IF_ERROR(ptc::check_position(spec, at).with_context(what));
    auto pos = ptc::progressed(spec, at, *epoch, consumed);
    if (!pos) return pos.status().with_context(what);
    PreparedChange change;
    change.datasets.push_back({cur->with_position(*pos, 0, global_batch), cur});
    return change;
  }
  auto pos = ptc::progressed(cur->spec(), cur->position(), epoch.value_or(cur->position().epoch), consumed);
  if (!pos) return pos.status().with_context(what);
  PreparedChange change;
  const int new_dp = dp ? dp : pos->dp;
  const uint64_t batch = global_batch ? global_batch : cur->spec().global_batch;
  if (new_dp == pos->dp && batch == cur->spec().global_batch) {
    change.datasets.push_back({cur->with_position(*pos), cur});
    return change;
  }
  auto next = ptc::rebatched(cur->spec(), *pos, new_dp, batch);
  if (!next) return invalid("cannot re-split " + what + ": " + next.status().message());
  change.datasets.push_back({cur->with_position(next->pos, 0, next->global_batch), cur});
  return change;
}

std::map<std::string, uint64_t> resplit_versions(const std::vector<DatasetChange>& changes) {
  std::map<std::string, uint64_t> out;
  for (const auto& d : changes) out[d.next->name()] = d.replaced ? d.replaced->version() : 0;
  return out;
}

Result<std::vector<DatasetChange>> resplit_datasets(const Store& store, const std::string& job, int dp,
                                                    uint64_t global_batch) {
  std::vector<DatasetChange> out;
  auto snap = store.snapshot();
  bool any = false;
  for (const auto& [key, v] : snap->datasets) {
    any = any || key.first == job;
    const uint64_t batch = global_batch ? global_batch : v->spec().global_batch;
    if (key.first != job || (v->position().dp == dp && batch == v->spec().global_batch)) continue;
    auto next = ptc::rebatched(v->spec(), v->position(), dp, batch);
    if (!next) return invalid("cannot re-split dataset " + job + "/" + key.second + ": " + next.status().message());
    out.push_back({v->with_position(next->pos, 0, next->global_batch), v});
  }
  if (global_batch && !any)
    return invalid("job '" + job + "' has no dataset to take the global batch " + std::to_string(global_batch));
  return out;
}

}  // namespace ptcfs
