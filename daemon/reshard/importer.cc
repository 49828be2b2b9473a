#include "daemon/reshard/importer.h"
#include "daemon/reshard/rank_file.h"

#include "daemon/store/checksum.h"
#include "daemon/store/failpoint.h"
#include "daemon/store/parallel.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#include "ptc/base/log.h"
#include "ptc/formats/safetensors.h"
#include "ptc/plan.h"

namespace ptcfs {
namespace {

// A rank file whose header has been validated against the layout.
struct RankFile {
  ptc::ShardId shard;
  std::string path;
  formats::SafetensorsHeader header;
  std::vector<size_t> entry_of_slice;  // header entry index of each layout slice
  // Per header entry: byte ranges (offset in the slice, length) that are padding, sorted.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> padding;
};

// Records where each slice's padding lies, per header entry of each rank file.
Status find_padding(const ptc::Layout& layout, std::vector<RankFile>& files) {
  PTC_ASSIGN_OR_RETURN(formats::PaddingRanges pad, formats::layout_padding(layout));
  for (size_t s = 0; s < files.size(); ++s) {
    RankFile& rf = files[s];
    rf.padding.resize(rf.header.entries.size());
    if (rf.path.empty()) continue;  // not held here
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

Result<RankFile> check_rank_file(const ptc::Layout& layout, const ptc::ShardId& shard, const std::string& path) {
  PTC_ASSIGN_OR_RETURN(auto header, read_safetensors_header(path));
  RankFile rf{shard, path, std::move(header), {}, {}};
  PTC_ASSIGN_OR_RETURN(rf.entry_of_slice, formats::match_rank_header(layout, shard, rf.header, path));
  return rf;
}

// Lists the rank files of dir and checks that they are the layout's shards: all of them, or
// (in a cluster) at least those this node holds. Paths are empty for shards not held.
Result<std::vector<std::string>> rank_file_paths(const std::string& dir, const ptc::Layout& layout,
                                                 const StepPlacement& placement) {
  PTC_ASSIGN_OR_RETURN(auto names, list_dir(dir));
  std::set<std::string> expected;
  for (const auto& s : layout.shards()) expected.insert(s.name() + ".safetensors");
  for (const auto& n : names) {
    const std::string suffix = ".safetensors";
    if (n.size() < suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    if (expected.count(n)) continue;
    const auto id = ptc::parse_shard_name(n.substr(0, n.size() - suffix.size()));
    if (id)
      return invalid(dir + "/" + n + ": extra rank file: " + layout.parallelism().to_string() + " has no shard " +
                     id->name());
    return invalid(dir + "/" + n + ": unexpected file (rank files are named tp{t}-pp{p}.safetensors)");
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
      return invalid(dir + "/" + n + ": missing rank file for shard " + s.name() + " of " +
                     layout.parallelism().to_string() + (placement.nodes.empty() ? "" : " (placed on this node)"));
    paths.push_back(dir + "/" + n);
  }
  return paths;
}

// Copies the data area of a validated rank file into a new blob, hashing every slice.
Result<std::vector<StoredSlice>> copy_rank_file(BlobStore& blobs, const RankFile& rf, const ptc::Layout& layout,
                                                std::vector<BlobWriter>& finished,
                                                const std::function<void(uint64_t)>& advance) {
  if (rf.header.entries.empty()) return std::vector<StoredSlice>();  // a shard holding no tensor
  PTC_ASSIGN_OR_RETURN(auto file, File::open_read(rf.path));
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
      PTC_ASSIGN_OR_RETURN(size_t got, file.read_at(rf.header.data_start + pos, buf.data(), n));
      if (got != n) return corrupt(rf.path + ": file shrank while importing");
      // Padding is stored as zeros whatever the rank file holds there (views show zeros).
      zero_padding(rf.padding[i], pos - e.begin, n, buf.data());
      hash.update(buf.data(), n);
      PTC_RETURN_IF_ERROR(w.append(buf.data(), n));
      pos += n;
      advance(n);
    }
    hashes[i] = hash.digest();
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

Result<ImportSummary> import_checkpoint(Store& store, const std::string& dir, const std::string& job,
                                        const std::string& step, const ProgressFn& progress) {
  ImportSummary sum;
  PTC_ASSIGN_OR_RETURN(PreparedChange change,
                       prepare_import(
                           store, dir, job, step,
                           [](const ptc::Layout&) -> Result<StepPlacement> { return StepPlacement{}; }, sum, progress));
  const auto t0 = std::chrono::steady_clock::now();
  PTC_RETURN_IF_ERROR(commit_change(store, change));
  sum.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("imported {}/{} from {}: {} shards, {} tensors, {} bytes in {:.2f} s", job, step, dir, sum.shards,
            sum.tensors, sum.bytes, sum.seconds);
  return sum;
}

Result<PreparedChange> prepare_import(Store& store, const std::string& dir, const std::string& job,
                                      const std::string& step, const PlaceFn& place, ImportSummary& sum,
                                      const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  PreparedChange change(store);
  PTC_RETURN_IF_ERROR(change.claim(store, Claim::kNewStep, job, step));
  const std::string ptc_path = dir + "/ptc.json";
  PTC_ASSIGN_OR_RETURN(std::string text, read_small_file(ptc_path, 64 << 20));
  PTC_ASSIGN_OR_RETURN(ptc::Ptc ptc, ptc::parse_ptc_json(text, ptc_path));
  PTC_RETURN_IF_ERROR(ptc::validate_tensor_names(ptc.tensors).with_context(ptc_path));
  auto layout_r = ptc::Layout::make(ptc, ptc.parallelism);
  if (!layout_r) return layout_r.status().with_context(ptc_path);
  ptc::Layout layout = std::move(layout_r).value();
  PTC_ASSIGN_OR_RETURN(StepPlacement placement, place(layout));

  PTC_ASSIGN_OR_RETURN(auto paths, rank_file_paths(dir, layout, placement));
  std::vector<RankFile> files;
  std::vector<size_t> held;  // indices into files of the shards copied here
  uint64_t total = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i].empty()) {
      files.push_back(RankFile{layout.shards()[i], {}, {}, {}, {}});
      continue;
    }
    PTC_ASSIGN_OR_RETURN(RankFile rf, check_rank_file(layout, layout.shards()[i], paths[i]));
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
        PTC_ASSIGN_OR_RETURN(auto r, copy_rank_file(store.blobs(), files[held[k]], layout, mine, advance));
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
