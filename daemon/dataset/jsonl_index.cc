#include "daemon/dataset/jsonl_index.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>

#include "daemon/dataset/json_check.h"
#include "daemon/store/parallel.h"
#include "ptc/dataset.h"

namespace ptcfs {
namespace {

// How far a chunk reads past its end at a time to finish its last line (doubling after).
constexpr uint64_t kReadOn = 1 << 20;

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
  ptc::Status error;                  // a read failed
  bool stopped() const { return bad_line || too_many || !error; }
};

// Scans the lines that start in [c.begin, c.end), with `buf` as the thread's buffer. It
// reads from c.begin - 1: a line starts at c.begin only after a '\n' there.
ptc::Status scan_chunk(const JsonlInput& in, const Chunk& c, std::string& buf, ChunkResult& r) {
  const uint64_t from = c.begin == 0 ? 0 : c.begin - 1;
  uint64_t have = 0;  // bytes in buf, from `from`
  auto read = [&](uint64_t want) -> ptc::Status {
    want = std::min(want, in.size - (from + have));
    if (buf.size() < have + want) buf.resize(have + want);
    PTC_ASSIGN_OR_RETURN(size_t got, read_full(in.file->fd(), from + have, buf.data() + have, want, in.file->path()));
    if (got < want)
      return ptc::corrupt(in.file->path() + ": shorter than its size while it was read (changed meanwhile?)");
    have += got;
    return ptc::Status::ok();
  };
  PTC_RETURN_IF_ERROR(read(c.end - from));
  size_t pos = 0;
  if (c.begin > 0) {
    const void* nl = std::memchr(buf.data(), '\n', have);
    if (nl == nullptr) return ptc::Status::ok();  // a line from an earlier chunk covers this one
    pos = static_cast<size_t>(static_cast<const char*>(nl) - buf.data()) + 1;
  }
  while (from + pos < c.end) {
    size_t scanned = pos;
    const char* nl = nullptr;
    while ((nl = static_cast<const char*>(std::memchr(buf.data() + scanned, '\n', have - scanned))) == nullptr) {
      scanned = have;
      if (from + have == in.size) break;  // the last line, without a newline
      PTC_RETURN_IF_ERROR(read(std::max<uint64_t>(kReadOn, have - pos)));
    }
    const size_t line_end = nl ? static_cast<size_t>(nl - buf.data()) : have;
    const size_t next = nl ? line_end + 1 : have;
    const std::string_view line(buf.data() + pos, line_end - pos);
    if (!blank(line)) {
      if (!json_valid(line)) {
        r.bad_line = true;
        return ptc::Status::ok();
      }
      r.samples.push_back({from + pos, next - pos, c.file, nl ? 0u : kSupplyNewline});
      if (r.samples.size() > ptc::kMaxSamples) {
        r.too_many = true;
        return ptc::Status::ok();
      }
    }
    ++r.lines;
    pos = next;
  }
  return ptc::Status::ok();
}

ptc::Status too_many_samples() { return ptc::invalid("more than " + std::to_string(ptc::kMaxSamples) + " samples"); }

}  // namespace

ptc::Status index_jsonl_files(const std::vector<JsonlInput>& files, std::vector<SampleRecord>& out,
                              const std::function<void(uint64_t)>& advance, const JsonlScanOptions& options) {
  const uint64_t step = std::max<uint64_t>(1, options.chunk_bytes);
  std::vector<Chunk> chunks;
  for (size_t f = 0; f < files.size(); ++f)
    for (uint64_t b = 0; b < files[f].size; b += step)
      chunks.push_back({static_cast<uint32_t>(f), b, std::min(files[f].size, b + step)});

  std::vector<ChunkResult> results(chunks.size());
  // Chunks after one that stopped are not needed: its fault is reported first.
  std::atomic<size_t> first_stop{std::numeric_limits<size_t>::max()};
  std::mutex progress_mu;
  PTC_RETURN_IF_ERROR(parallel_for(chunks.size(), options.threads, [&]() -> Worker {
    return [&, buf = std::string()](size_t i) mutable -> ptc::Status {
      if (i > first_stop.load()) return ptc::Status::ok();
      ChunkResult& r = results[i];
      r.error = scan_chunk(files[chunks[i].file], chunks[i], buf, r);
      if (r.stopped())
        for (size_t s = first_stop.load(); i < s && !first_stop.compare_exchange_weak(s, i);) {
        }
      if (advance) {
        std::lock_guard lock(progress_mu);
        advance(chunks[i].end - chunks[i].begin);
      }
      return ptc::Status::ok();
    };
  }));

  // Joined in file order: the first fault in the files is the one reported.
  size_t total = out.size();
  for (const auto& r : results) total += r.samples.size();
  out.reserve(std::min<size_t>(total, ptc::kMaxSamples + 1));
  uint64_t line_base = 0;  // lines of the file before the chunk
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0 && chunks[i].file != chunks[i - 1].file) line_base = 0;
    const ChunkResult& r = results[i];
    if (r.too_many || out.size() + r.samples.size() > ptc::kMaxSamples) return too_many_samples();
    if (!r.error) return r.error;
    if (r.bad_line)
      return ptc::corrupt(files[chunks[i].file].file->path() + ": line " + std::to_string(line_base + r.lines + 1) +
                          " is not valid JSON");
    out.insert(out.end(), r.samples.begin(), r.samples.end());
    line_base += r.lines;
  }
  return ptc::Status::ok();
}

}  // namespace ptcfs
