#include "daemon/dataset/jsonl_index.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "daemon/dataset/json_check.h"
#include "daemon/store/guarded_copy.h"
#include "daemon/store/parallel.h"
#include "daemon/store/read_mapping.h"
#include "ptc/dataset.h"

namespace ptcfs {
namespace {

// How far an unmapped chunk first reads past its end to finish its last line (doubling
// after): most lines end well within it, so a chunk reads little more than its own bytes.
constexpr uint64_t kReadOn = 64 << 10;

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

struct Chunk {
  uint32_t file = 0;
  uint64_t begin = 0, end = 0;  // the bytes whose lines it owns (those starting there)
};

struct ChunkResult {
  std::vector<SampleRecord> samples;  // up to the first line at fault
  uint64_t lines = 0;                 // lines that start in the chunk before any fault, blank ones too
  bool bad_line = false;              // the line after those is not valid JSON
  bool too_many = false;              // more than ptc::kMaxSamples samples
  Status error;                       // a read failed
  bool stopped() const { return bad_line || too_many || !error; }
};

Status cut_short(const File& file) {
  return corrupt(file.path() + ": shorter than its size while it was read (changed meanwhile?)");
}

// The lines a pass under the SIGBUS guard found: at most kBatch samples, then the caller
// takes them and starts the next pass. Nothing under the guard allocates.
struct LineBatch {
  static constexpr size_t kBatch = 4096;
  enum class Stop { kEnd, kFull, kCheck };
  std::array<SampleRecord, kBatch> samples;
  size_t count = 0;
  uint64_t lines = 0;  // lines the pass went past, blank ones too
  uint64_t pos = 0;    // where the next line starts
  Stop stop = Stop::kEnd;
  uint64_t line_end = 0, next = 0;  // kCheck: the line at pos ends here, and the one after it starts at next
};

// Bytes of a file in memory: its bytes [origin, end) at `data` (a mapping of the whole file,
// or a chunk read with pread and read on to the end of its last line).
struct Bytes {
  const char* data = nullptr;
  uint64_t origin = 0, end = 0;
  const char* at(uint64_t pos) const { return data + (pos - origin); }
};

// From batch.pos, the lines that start before `stop` in `bytes`: each line found valid by
// the fast checker becomes a sample; one it leaves (invalid, or a case it does not decide)
// stops the pass with kCheck, for the caller to decide outside the guard. A line without a
// '\n' before bytes.end is the file's last one.
void scan_lines(const Bytes& bytes, uint64_t stop, uint32_t file, LineBatch& b) {
  b.count = 0;
  b.lines = 0;
  while (b.pos < stop) {
    if (b.count == LineBatch::kBatch) {
      b.stop = LineBatch::Stop::kFull;
      return;
    }
    const char* nl = static_cast<const char*>(std::memchr(bytes.at(b.pos), '\n', bytes.end - b.pos));
    const uint64_t line_end = nl ? bytes.origin + static_cast<uint64_t>(nl - bytes.data) : bytes.end;
    const uint64_t next = nl ? line_end + 1 : bytes.end;
    const std::string_view line(bytes.at(b.pos), line_end - b.pos);
    if (!blank(line)) {
      if (!json_valid_fast(line)) {
        b.stop = LineBatch::Stop::kCheck;
        b.line_end = line_end;
        b.next = next;
        return;
      }
      b.samples[b.count++] = {b.pos, next - b.pos, file, nl ? 0u : kSupplyNewline};
    }
    ++b.lines;
    b.pos = next;
  }
  b.stop = LineBatch::Stop::kEnd;
}

// The lines that start in [c.begin, c.end), from `bytes`, which hold c.begin - 1 (a line
// starts at c.begin only after a '\n' there) up to the end of the last of them. Under the
// SIGBUS guard, as a mapping needs: a page the file no longer has is the same error as a
// short pread (harmless for bytes read into memory).
Status scan_chunk(const JsonlInput& in, const Bytes& bytes, const Chunk& c, LineBatch& b, ChunkResult& r) {
  b.pos = c.begin;
  if (c.begin > 0) {  // the first line that starts in the chunk: after the first '\n' from c.begin - 1 on
    // (one at c.end - 1 starts a line the next chunk owns: none is found here then)
    const char* nl = nullptr;
    auto find = [&] { nl = static_cast<const char*>(std::memchr(bytes.at(c.begin - 1), '\n', c.end - (c.begin - 1))); };
    if (!run_guarded(find)) return cut_short(*in.file);
    if (nl == nullptr) return Status::ok();  // a line from an earlier chunk covers this one
    b.pos = bytes.origin + static_cast<uint64_t>(nl - bytes.data) + 1;
  }
  std::string slow;  // a line the fast checker left, copied out for nlohmann
  for (;;) {
    auto pass = [&] { scan_lines(bytes, c.end, c.file, b); };
    if (!run_guarded(pass)) return cut_short(*in.file);
    r.samples.insert(r.samples.end(), b.samples.begin(), b.samples.begin() + static_cast<ptrdiff_t>(b.count));
    r.lines += b.lines;
    if (r.samples.size() > ptc::kMaxSamples) {
      r.too_many = true;
      return Status::ok();
    }
    if (b.stop == LineBatch::Stop::kEnd) return Status::ok();
    if (b.stop == LineBatch::Stop::kCheck) {
      slow.resize(b.line_end - b.pos);
      const CopyRun run{slow.data(), bytes.at(b.pos), slow.size()};
      if (!copy_guarded(&run, 1)) return cut_short(*in.file);
      if (!json_valid(slow)) {
        r.bad_line = true;
        return Status::ok();
      }
      r.samples.push_back({b.pos, b.next - b.pos, c.file, b.next == b.line_end ? kSupplyNewline : 0u});
      ++r.lines;
      b.pos = b.next;
    }
  }
}

// scan_chunk where the file is not mapped: the chunk read into `buf` with pread from
// c.begin - 1, then on past c.end (kReadOn, then twice as much each time) until its last line
// ends.
// The bytes read are added to `counted` when set.
Status read_and_scan_chunk(const JsonlInput& in, const Chunk& c, std::string& buf, LineBatch& b, ChunkResult& r,
                           std::atomic<uint64_t>* counted) {
  const uint64_t from = c.begin == 0 ? 0 : c.begin - 1;
  uint64_t have = 0;  // bytes in buf, from `from`
  auto read = [&](uint64_t want) -> Status {
    want = std::min(want, in.size - (from + have));
    if (buf.size() < have + want) buf.resize(have + want);
    PTC_ASSIGN_OR_RETURN(size_t got, read_full(in.file->fd(), from + have, buf.data() + have, want, in.file->path()));
    if (counted) counted->fetch_add(got, std::memory_order_relaxed);
    if (got < want) return cut_short(*in.file);
    have += got;
    return Status::ok();
  };
  PTC_RETURN_IF_ERROR(read(c.end - from));
  // No '\n' at all: a line from an earlier chunk covers this one (and reading on is not needed).
  if (c.begin > 0 && std::memchr(buf.data(), '\n', have) == nullptr) return Status::ok();
  // Every line that starts in the chunk ends by the first '\n' from c.end - 1 on, or the file's end.
  // (Each pass looks only at the bytes it has not looked at yet.)
  uint64_t read_on = kReadOn;
  for (uint64_t seen = c.end - 1 - from; std::memchr(buf.data() + seen, '\n', have - seen) == nullptr; read_on *= 2) {
    if (from + have == in.size) break;  // the file's last line, without a '\n'
    seen = have;
    PTC_RETURN_IF_ERROR(read(read_on));
  }
  return scan_chunk(in, {buf.data(), from, from + have}, c, b, r);
}

// Whether the file still has the size it was indexed at: a file cut short inside its last
// mapped page reads as zeros there, without SIGBUS, so each mapped scan checks after.
Status still_whole(const JsonlInput& in) {
  struct stat st {};
  if (::fstat(in.file->fd(), &st) != 0 || static_cast<uint64_t>(st.st_size) < in.size) return cut_short(*in.file);
  return Status::ok();
}

Status too_many_samples() { return invalid("more than " + std::to_string(ptc::kMaxSamples) + " samples"); }

}  // namespace

Status index_jsonl_files(const std::vector<JsonlInput>& files, std::vector<SampleRecord>& out,
                         const std::function<void(uint64_t)>& advance, const JsonlScanOptions& options) {
  const uint64_t step = std::max<uint64_t>(1, options.chunk_bytes);
  std::vector<Chunk> chunks;
  for (size_t f = 0; f < files.size(); ++f)
    for (uint64_t b = 0; b < files[f].size; b += step)
      chunks.push_back({static_cast<uint32_t>(f), b, std::min(files[f].size, b + step)});

  std::vector<std::unique_ptr<ReadMapping>> maps;
  for (const JsonlInput& f : files)
    maps.push_back(options.map ? std::make_unique<ReadMapping>(f.file->fd(), f.size) : nullptr);

  std::vector<ChunkResult> results(chunks.size());
  // Chunks after one that stopped are not needed: its fault is reported first.
  std::atomic<size_t> first_stop{std::numeric_limits<size_t>::max()};
  std::mutex progress_mu;
  PTC_RETURN_IF_ERROR(parallel_for(chunks.size(), options.threads, [&]() -> Worker {
    return [&, buf = std::string(), batch = std::shared_ptr<LineBatch>()](size_t i) mutable -> Status {
      if (i > first_stop.load()) return Status::ok();
      ChunkResult& r = results[i];
      const Chunk& c = chunks[i];
      if (!batch) batch = std::make_shared<LineBatch>();
      if (const char* base = maps[c.file] ? maps[c.file]->data() : nullptr)
        r.error = scan_chunk(files[c.file], {base, 0, files[c.file].size}, c, *batch, r);
      else
        r.error = read_and_scan_chunk(files[c.file], c, buf, *batch, r, options.pread_bytes);
      if (r.stopped())
        for (size_t s = first_stop.load(); i < s && !first_stop.compare_exchange_weak(s, i);) {
        }
      if (advance) {
        std::lock_guard lock(progress_mu);
        advance(chunks[i].end - chunks[i].begin);
      }
      return Status::ok();
    };
  }));

  for (size_t f = 0; f < files.size(); ++f)
    if (maps[f] && maps[f]->data()) PTC_RETURN_IF_ERROR(still_whole(files[f]));

  // Joined in file order: the first fault in the files is the one reported. Each chunk's
  // samples are freed once appended, so the samples are held twice only a chunk at a time
  // (out's reserved pages are touched as the chunks go).
  size_t total = out.size();
  for (const auto& r : results) total += r.samples.size();
  out.reserve(std::min<size_t>(total, ptc::kMaxSamples + 1));
  uint64_t line_base = 0;  // lines of the file before the chunk
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0 && chunks[i].file != chunks[i - 1].file) line_base = 0;
    ChunkResult& r = results[i];
    if (r.too_many || out.size() + r.samples.size() > ptc::kMaxSamples) return too_many_samples();
    if (!r.error) return r.error;
    if (r.bad_line)
      return corrupt(files[chunks[i].file].file->path() + ": line " + std::to_string(line_base + r.lines + 1) +
                     " is not valid JSON");
    out.insert(out.end(), r.samples.begin(), r.samples.end());
    std::vector<SampleRecord>().swap(r.samples);
    line_base += r.lines;
  }
  return Status::ok();
}

}  // namespace ptcfs
