#include "daemon/reshard/hf_import.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>

#include "daemon/reshard/rank_file.h"
#include "daemon/store/checksum.h"
#include "daemon/store/file_util.h"
#include "ptc/base/log.h"

namespace ptcfs {

namespace {

// One slice of the unsharded layout to fill from a tensor of a file.
struct SliceSource {
  size_t slice = 0;                                    // in layout.slices(shard 0)
  const formats::SafetensorsEntry* entry = nullptr;    // its bytes in the file
  uint64_t bytes = 0;                                  // the slice's size (with padding)
  std::vector<std::pair<uint64_t, uint64_t>> padding;  // (offset in the slice, length), sorted
};

// Copies the tensors of one file into a new blob: each slice's bytes in order, the source's
// bytes between the padding ranges and zeros in them.
Result<std::vector<std::pair<size_t, StoredSlice>>> copy_file(
    BlobStore& blobs, SourceDir& src_dir, const std::string& name, const formats::SafetensorsHeader& header,
    std::vector<SliceSource> sources, std::vector<BlobWriter>& finished, const std::function<void(uint64_t)>& advance) {
  std::sort(sources.begin(), sources.end(),
            [](const SliceSource& a, const SliceSource& b) { return a.entry->begin < b.entry->begin; });
  const std::string path = src_dir.where(name);
  PTC_ASSIGN_OR_RETURN(BlobWriter w, blobs.create());
  constexpr uint64_t kChunk = 4 << 20;
  std::vector<char> buf(kChunk);
  const std::vector<char> zeros(kChunk, 0);
  std::vector<std::pair<size_t, StoredSlice>> out;
  uint64_t at = 0;  // the blob's size so far
  for (const SliceSource& s : sources) {
    Xxh3Stream hash;
    uint64_t src = header.data_start + s.entry->begin;
    auto copy = [&](uint64_t n) -> Status {
      while (n > 0) {
        const size_t k = static_cast<size_t>(std::min(kChunk, n));
        PTC_ASSIGN_OR_RETURN(size_t got, src_dir.read_at(name, src, buf.data(), k));
        if (got != k) return corrupt(path + ": file shrank while importing (tensor " + s.entry->name + ")");
        hash.update(buf.data(), k);
        PTC_RETURN_IF_ERROR(w.append(buf.data(), k));
        src += k;
        n -= k;
        advance(k);
      }
      return Status::ok();
    };
    auto zero = [&](uint64_t n) -> Status {
      while (n > 0) {
        const size_t k = static_cast<size_t>(std::min(kChunk, n));
        hash.update(zeros.data(), k);
        PTC_RETURN_IF_ERROR(w.append(zeros.data(), k));
        n -= k;
      }
      return Status::ok();
    };
    uint64_t pos = 0;
    for (const auto& [off, len] : s.padding) {
      PTC_RETURN_IF_ERROR(copy(off - pos));
      PTC_RETURN_IF_ERROR(zero(len));
      pos = off + len;
    }
    PTC_RETURN_IF_ERROR(copy(s.bytes - pos));
    if (src != header.data_start + s.entry->end)
      return internal(path + ": tensor " + s.entry->name + ": the layout's slice does not hold its bytes");
    out.emplace_back(s.slice, StoredSlice{{Extent{w.id(), at, s.bytes}}, hash.digest()});
    at += s.bytes;
  }
  PTC_RETURN_IF_ERROR(w.finish());
  finished.push_back(std::move(w));
  return out;
}

// The checkpoint in `src`: its listing, the index and config.json read whole, each header with
// ranged reads.
Result<formats::HfCheckpoint> read_hf_checkpoint(SourceDir& src, const std::string& dir) {
  formats::HfReader io{
      [&] { return src.list(); }, [&](const std::string& name) { return src.read_small(name, 64 << 20); },
      [&](const std::string& name) -> Result<formats::SafetensorsHeader> {
        PTC_ASSIGN_OR_RETURN(const uint64_t size, src.size(name));
        return formats::read_safetensors_header(
            size, [&](uint64_t off, void* buf, size_t len) { return src.read_at(name, off, buf, len); },
            src.where(name));
      }};
  return formats::read_hf_checkpoint(dir, io);
}

}  // namespace

Result<ImportSummary> import_hf(Store& store, const std::string& dir, const formats::PtcTemplate& tmpl,
                                const std::string& job, const std::string& step,
                                const std::optional<ptc::Parallelism>& then, const ProgressFn& progress) {
  PTC_ASSIGN_OR_RETURN(auto src, kLocalSources.open(dir));
  return import_hf(store, *src, tmpl, job, step, then, progress);
}

Result<ImportSummary> import_hf(Store& store, SourceDir& src, const formats::PtcTemplate& tmpl, const std::string& job,
                                const std::string& step, const std::optional<ptc::Parallelism>& then,
                                const ProgressFn& progress) {
  std::string dir = src.where("");
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const auto t0 = std::chrono::steady_clock::now();
  PreparedChange change(store);
  PTC_RETURN_IF_ERROR(change.claim(store, Claim::kNewStep, job, step));
  PTC_ASSIGN_OR_RETURN(formats::HfCheckpoint ck, read_hf_checkpoint(src, dir));
  std::vector<std::string> skipped;
  PTC_ASSIGN_OR_RETURN(ptc::Ptc ptc, formats::infer_ptc(tmpl, ck.infos(), ptc::Parallelism{}, dir,
                                                        ck.config ? &*ck.config : nullptr, &skipped));
  if (ck.config) ptc.hf_config = ck.config->json;  // the hf/ view's config.json
  if (then)
    if (auto target = ptc::Layout::make(ptc, *then); !target)
      return target.status().with_context(dir + " cannot be laid out at " + then->to_string());
  auto layout_r = ptc::Layout::make(ptc, ptc.parallelism);
  if (!layout_r) return layout_r.status().with_context(dir);
  ptc::Layout layout = std::move(layout_r).value();
  PTC_ASSIGN_OR_RETURN(formats::PaddingRanges padding, formats::layout_padding(layout));

  // Which file fills each slice of the one shard.
  const ptc::ShardId& shard = layout.shards().front();
  const auto& slices = layout.slices(shard);
  std::map<std::string_view, const formats::HfTensor*> by_name;
  for (const auto& t : ck.tensors) by_name[t.info.name] = &t;
  std::vector<std::vector<SliceSource>> per_file(ck.files.size());
  uint64_t total = 0;
  for (size_t j = 0; j < slices.size(); ++j) {
    const auto& spec = layout.tensor(slices[j]);
    const formats::HfTensor* t = by_name.at(spec.name);
    const auto& entry = ck.files[t->file].header.entries[t->entry];
    SliceSource s{j, &entry,
                  static_cast<uint64_t>(ptc::num_elements(slices[j].local_shape)) * ptc::dtype_size(spec.dtype),
                  padding[0][j]};
    total += entry.end - entry.begin;
    per_file[t->file].push_back(std::move(s));
  }

  std::vector<StoredSlice> stored(slices.size());
  std::mutex mu;
  PTC_RETURN_IF_ERROR(copy_in_parallel(
      store, ck.files.size(), total, progress,
      [&](size_t f, std::vector<BlobWriter>& mine, const std::function<void(uint64_t)>& advance) -> Status {
        if (per_file[f].empty()) return Status::ok();  // every tensor of it skipped
        PTC_ASSIGN_OR_RETURN(
            auto r, copy_file(store.blobs(), src, ck.files[f].name, ck.files[f].header, per_file[f], mine, advance));
        std::lock_guard lock(mu);
        for (auto& [j, s] : r) stored[j] = std::move(s);
        return Status::ok();
      },
      change.blobs));
  ImportSummary sum;
  sum.job = job;
  sum.step = step;
  sum.shards = 1;
  sum.tensors = layout.ptc().tensors.size();
  sum.bytes = total;
  std::vector<std::vector<StoredSlice>> shards{std::move(stored)};
  change.next = store.new_version(job, step, 1, std::move(layout), std::move(shards));
  PTC_RETURN_IF_ERROR(commit_change(store, change));
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info(
      "imported {}/{} from Hugging Face checkpoint {} with template {}: {} files, {} tensors{}, {} bytes in "
      "{:.2f} s",
      job, step, dir, tmpl.name, ck.files.size(), sum.tensors,
      skipped.empty() ? std::string() : " (" + std::to_string(skipped.size()) + " skipped by the template)", sum.bytes,
      sum.seconds);
  return sum;
}

}  // namespace ptcfs
