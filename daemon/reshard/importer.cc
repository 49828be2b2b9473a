#include "daemon/reshard/importer.h"
#include "daemon/reshard/rank_file.h"
#include "daemon/reshard/source_dir.h"

#include "daemon/store/checksum.h"
#include "daemon/store/failpoint.h"
#include "daemon/store/parallel.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <cstring>
#include <ctime>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "daemon/store/file_util.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "ptc/formats/export_manifest.h"
#include "ptc/formats/safetensors.h"
#include "ptc/plan.h"

namespace ptcfs {
namespace {

// A rank file whose header has been validated against the layout.
struct RankFile {
  ptc::ShardId shard;
  std::string name;  // in the source folder ("": not held here)
  formats::SafetensorsHeader header;
  std::vector<size_t> entry_of_slice;  // header entry index of each layout slice
  // Per header entry: byte ranges (offset in the slice, length) that are padding, sorted.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> padding;
  // The whole file's size and XXH3-64 as `ptcfs export` wrote them (ptcfs-export.json), when known.
  std::optional<std::pair<uint64_t, uint64_t>> exported;
};

// The folder's ptcfs-export.json (written by `ptcfs export` and the write-through tier,
// docs/OPERATIONS.md "The S3 tier"): per rank file, its size and XXH3-64. Empty when the folder
// has none.
Result<std::map<std::string, std::pair<uint64_t, uint64_t>>> read_export_manifest(
    SourceDir& src, const std::vector<std::string>& names) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> out;
  if (std::find(names.begin(), names.end(), formats::kExportManifest) == names.end()) return out;
  const std::string where = src.where(formats::kExportManifest);
  PTC_ASSIGN_OR_RETURN(const std::string text, src.read_small(formats::kExportManifest, 16 << 20));
  PTC_ASSIGN_OR_RETURN(const formats::ExportManifest m, formats::parse_export_manifest(text, where));
  for (const auto& f : m.files) out[f.name] = {f.size, f.xxh3};
  return out;
}

// Records where each slice's padding lies, per header entry of each rank file.
Status find_padding(const ptc::Layout& layout, std::vector<RankFile>& files) {
  PTC_ASSIGN_OR_RETURN(formats::PaddingRanges pad, formats::layout_padding(layout));
  for (size_t s = 0; s < files.size(); ++s) {
    RankFile& rf = files[s];
    rf.padding.resize(rf.header.entries.size());
    if (rf.name.empty()) continue;  // not held here
    for (size_t j = 0; j < pad[s].size(); ++j) rf.padding[rf.entry_of_slice[j]] = pad[s][j];
  }
  return Status::ok();
}

// Zeroes the padding that falls in bytes [pos, pos + n) of a slice, held in buf.
void zero_padding(const std::vector<std::pair<uint64_t, uint64_t>>& ranges, uint64_t pos, uint64_t n, char* buf) {
  for (const auto& [off, len] : ranges) {
    const uint64_t lo = std::max(off, pos), hi = std::min(off + len, pos + n);
    if (lo < hi) std::memset(buf + (lo - pos), 0, hi - lo);
  }
}

Result<RankFile> check_rank_file(SourceDir& src, const ptc::Layout& layout, const ptc::ShardId& shard,
                                 const std::string& name) {
  const std::string where = src.where(name);
  PTC_ASSIGN_OR_RETURN(const uint64_t size, src.size(name));
  PTC_ASSIGN_OR_RETURN(
      auto header,
      formats::read_safetensors_header(
          size, [&](uint64_t off, void* buf, size_t len) { return src.read_at(name, off, buf, len); }, where));
  RankFile rf{shard, name, std::move(header), {}, {}, std::nullopt};
  PTC_ASSIGN_OR_RETURN(rf.entry_of_slice, formats::match_rank_header(layout, shard, rf.header, where));
  return rf;
}

// Lists the rank files of the folder and checks that they are the layout's shards: all of them,
// or (in a cluster) at least those this node holds. Names are empty for shards not held.
Result<std::vector<std::string>> rank_file_names(SourceDir& src, const ptc::Layout& layout,
                                                 const StepPlacement& placement) {
  PTC_ASSIGN_OR_RETURN(auto names, src.list());
  std::set<std::string> expected;
  for (const auto& s : layout.shards()) expected.insert(s.name() + ".safetensors");
  for (const auto& n : names) {
    const std::string suffix = ".safetensors";
    if (n.size() < suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    if (expected.count(n)) continue;
    const auto id = ptc::parse_shard_name(n.substr(0, n.size() - suffix.size()));
    if (id)
      return invalid(src.where(n) + ": extra rank file: " + layout.parallelism().to_string() + " has no shard " +
                     id->name());
    return invalid(src.where(n) + ": unexpected file (rank files are named tp{t}-pp{p}.safetensors)");
  }
  std::vector<std::string> paths;
  for (size_t i = 0; i < layout.shards().size(); ++i) {
    const auto& s = layout.shards()[i];
    const std::string n = s.name() + ".safetensors";
    if (!placement.holds(i)) {
      paths.emplace_back();
      continue;
    }
    if (std::find(names.begin(), names.end(), n) == names.end())
      return invalid(src.where(n) + ": missing rank file for shard " + s.name() + " of " +
                     layout.parallelism().to_string() + (placement.nodes.empty() ? "" : " (placed on this node)"));
    paths.push_back(n);
  }
  return paths;
}

// Copies the data area of a validated rank file into a new blob, hashing every slice.
Result<std::vector<StoredSlice>> copy_rank_file(BlobStore& blobs, SourceDir& src, const RankFile& rf,
                                                const ptc::Layout& layout, std::vector<BlobWriter>& finished,
                                                const std::function<void(uint64_t)>& advance) {
  if (rf.header.entries.empty()) return std::vector<StoredSlice>();  // a shard holding no tensor
  const std::string where = src.where(rf.name);
  // The whole file's digest, when its export recorded one: the header's bytes, then the data's
  // as read (before the padding is zeroed).
  Xxh3Stream whole;
  if (rf.exported) {
    std::string head(rf.header.data_start, '\0');
    PTC_ASSIGN_OR_RETURN(size_t got, src.read_at(rf.name, 0, head.data(), head.size()));
    if (got != head.size()) return corrupt(where + ": file shrank while importing");
    whole.update(head.data(), head.size());
  }
  PTC_ASSIGN_OR_RETURN(BlobWriter w, blobs.create());
  const auto& entries = rf.header.entries;  // sorted by begin, contiguous from 0
  std::vector<uint64_t> hashes(entries.size());
  constexpr size_t kChunk = 4 << 20;
  std::vector<char> buf(kChunk);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    Xxh3Stream hash;
    for (uint64_t pos = e.begin; pos < e.end;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, e.end - pos));
      PTC_ASSIGN_OR_RETURN(size_t got, src.read_at(rf.name, rf.header.data_start + pos, buf.data(), n));
      if (got != n) return corrupt(where + ": file shrank while importing");
      if (rf.exported) whole.update(buf.data(), n);
      // Padding is stored as zeros whatever the rank file holds there (views show zeros).
      zero_padding(rf.padding[i], pos - e.begin, n, buf.data());
      hash.update(buf.data(), n);
      PTC_RETURN_IF_ERROR(w.append(buf.data(), n));
      pos += n;
      advance(n);
    }
    hashes[i] = hash.digest();
  }
  if (rf.exported && whole.digest() != rf.exported->second) {
    return corrupt(where + ": its bytes are not the ones `ptcfs export` wrote (XXH3-64 differs from " +
                   formats::kExportManifest + "): the object was changed or damaged since; nothing was imported");
  }
  PTC_RETURN_IF_ERROR(w.finish());
  std::vector<StoredSlice> stored;
  const auto& slices = layout.slices(rf.shard);
  for (size_t j = 0; j < slices.size(); ++j) {
    const auto& e = entries[rf.entry_of_slice[j]];
    stored.push_back(StoredSlice{{Extent{w.id(), e.begin, e.end - e.begin}}, hashes[rf.entry_of_slice[j]]});
  }
  finished.push_back(std::move(w));
  return stored;
}

}  // namespace

Status copy_in_parallel(Store& store, size_t n, uint64_t total, const ProgressFn& progress, const CopyFn& copy,
                        std::vector<uint64_t>& made) {
  std::mutex mu;
  uint64_t done = 0;
  auto advance = [&](uint64_t k) {
    std::lock_guard lock(mu);
    done += k;
    if (progress) progress(done, total);
  };
  std::vector<BlobWriter> finished;  // guarded by mu
  const Status first_error = parallel_for(n, 0, [&]() -> Worker {
    return [&](size_t i) -> Status {
      std::vector<BlobWriter> mine;
      auto s = copy(i, mine, advance);
      std::lock_guard lock(mu);
      for (auto& b : mine) finished.push_back(std::move(b));
      return s;
    };
  });
  for (const auto& b : finished) made.push_back(b.id());
  if (first_error.is_ok()) return first_error;
  for (uint64_t id : made) {
    (void)store.blobs().remove(id);
    store.blobs().settle(id);
  }
  made.clear();
  return first_error;
}

Result<ImportSummary> import_checkpoint(Store& store, SourceDir& src, const std::string& job, const std::string& step,
                                        const ProgressFn& progress) {
  ImportSummary sum;
  PTC_ASSIGN_OR_RETURN(PreparedChange change,
                       prepare_import(
                           store, src, job, step,
                           [](const ptc::Layout&) -> Result<StepPlacement> { return StepPlacement{}; }, sum, progress));
  const auto t0 = std::chrono::steady_clock::now();
  PTC_RETURN_IF_ERROR(commit_change(store, change));
  sum.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("imported {}/{} from {}: {} shards, {} tensors, {} bytes in {:.2f} s", job, step, src.where(""), sum.shards,
            sum.tensors, sum.bytes, sum.seconds);
  return sum;
}

Result<ImportSummary> import_checkpoint(Store& store, const std::string& dir, const std::string& job,
                                        const std::string& step, const ProgressFn& progress) {
  PTC_ASSIGN_OR_RETURN(auto src, SourceDirs().open(dir));
  return import_checkpoint(store, *src, job, step, progress);
}

Result<PreparedChange> prepare_import(Store& store, const std::string& dir, const std::string& job,
                                      const std::string& step, const PlaceFn& place, ImportSummary& summary,
                                      const ProgressFn& progress) {
  PTC_ASSIGN_OR_RETURN(auto src, SourceDirs().open(dir));
  return prepare_import(store, *src, job, step, place, summary, progress);
}

Result<PreparedChange> prepare_import(Store& store, SourceDir& src, const std::string& job, const std::string& step,
                                      const PlaceFn& place, ImportSummary& sum, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  PreparedChange change(store);
  PTC_RETURN_IF_ERROR(change.claim(store, Claim::kNewStep, job, step));
  const std::string ptc_path = src.where("ptc.json");
  PTC_ASSIGN_OR_RETURN(std::string text, src.read_small("ptc.json", 64 << 20));
  PTC_ASSIGN_OR_RETURN(ptc::Ptc ptc, ptc::parse_ptc_json(text, ptc_path));
  PTC_RETURN_IF_ERROR(ptc::validate_tensor_names(ptc.tensors).with_context(ptc_path));
  auto layout_r = ptc::Layout::make(ptc, ptc.parallelism);
  if (!layout_r) return layout_r.status().with_context(ptc_path);
  ptc::Layout layout = std::move(layout_r).value();
  PTC_ASSIGN_OR_RETURN(StepPlacement placement, place(layout));

  PTC_ASSIGN_OR_RETURN(auto paths, rank_file_names(src, layout, placement));
  PTC_ASSIGN_OR_RETURN(const auto names, src.list());
  PTC_ASSIGN_OR_RETURN(const auto exported, read_export_manifest(src, names));
  std::vector<RankFile> files;
  std::vector<size_t> held;  // indices into files of the shards copied here
  uint64_t total = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i].empty()) {
      files.push_back(RankFile{layout.shards()[i], {}, {}, {}, {}, std::nullopt});
      continue;
    }
    PTC_ASSIGN_OR_RETURN(RankFile rf, check_rank_file(src, layout, layout.shards()[i], paths[i]));
    if (!exported.empty()) {
      auto it = exported.find(paths[i]);
      if (it == exported.end())
        return corrupt(src.where(paths[i]) + ": not listed in " + formats::kExportManifest +
                       " (the folder was changed)");
      PTC_ASSIGN_OR_RETURN(const uint64_t size, src.size(paths[i]));
      if (size != it->second.first)
        return corrupt(src.where(paths[i]) + ": " + std::to_string(size) + " bytes, " + formats::kExportManifest +
                       " says " + std::to_string(it->second.first) + " (the object was changed or cut short)");
      rf.exported = it->second;
    }
    for (const auto& e : rf.header.entries) total += e.end - e.begin;
    files.push_back(std::move(rf));
    held.push_back(i);
  }

  PTC_RETURN_IF_ERROR(find_padding(layout, files));

  // Copy the rank files in parallel, one blob each.
  std::vector<std::vector<StoredSlice>> stored(files.size());
  std::mutex mu;
  PTC_RETURN_IF_ERROR(copy_in_parallel(
      store, held.size(), total, progress,
      [&](size_t k, std::vector<BlobWriter>& mine, const std::function<void(uint64_t)>& advance) -> Status {
        PTC_ASSIGN_OR_RETURN(auto r, copy_rank_file(store.blobs(), src, files[held[k]], layout, mine, advance));
        std::lock_guard lock(mu);
        stored[held[k]] = std::move(r);
        return Status::ok();
      },
      change.blobs));
  sum.job = job;
  sum.step = step;
  sum.shards = held.size();
  sum.tensors = layout.ptc().tensors.size();
  sum.bytes = total;
  change.next = store.new_version(job, step, 1, std::move(layout), std::move(stored), std::move(placement));
  failpoint("import.copied");
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return change;
}

}  // namespace ptcfs
