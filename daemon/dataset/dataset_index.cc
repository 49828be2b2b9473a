#include "daemon/dataset/dataset_index.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "daemon/store/file_util.h"
#include "ptc/formats/mmidx.h"

namespace ptcfs {
namespace {

constexpr size_t kChunk = 8 << 20;
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 36;

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Adds the samples of one JSONL file.
ptc::Status index_jsonl(const File& f, uint32_t file_no, uint64_t size, DatasetIndex& out,
                        const std::function<void(uint64_t)>& advance) {
  std::string buf(kChunk, '\0');
  std::string carry;        // the start of a line that continues in the next chunk
  uint64_t line_start = 0;  // file offset of the current line
  uint64_t line_no = 1;
  auto add_line = [&](std::string_view line, uint64_t start, uint64_t bytes, bool has_newline) -> ptc::Status {
    if (!blank(line)) {
      if (!nlohmann::json::accept(line.begin(), line.end()))
        return ptc::corrupt(f.path() + ": line " + std::to_string(line_no) + " is not valid JSON");
      out.samples.push_back({start, bytes, file_no, has_newline ? 0u : kSupplyNewline});
      if (out.samples.size() > ptc::kMaxSamples)
        return ptc::invalid("more than " + std::to_string(ptc::kMaxSamples) + " samples");
    }
    ++line_no;
    return ptc::Status::ok();
  };
  for (uint64_t pos = 0; pos < size;) {
    PTC_ASSIGN_OR_RETURN(size_t got, f.read_at(pos, buf.data(), std::min<uint64_t>(kChunk, size - pos)));
    if (got == 0) return ptc::corrupt(f.path() + ": shorter than its size while it was read (changed meanwhile?)");
    std::string_view chunk(buf.data(), got);
    size_t from = 0;
    for (size_t nl; (nl = chunk.find('\n', from)) != std::string_view::npos; from = nl + 1) {
      const uint64_t end = pos + nl + 1;
      if (carry.empty()) {
        PTC_RETURN_IF_ERROR(add_line(chunk.substr(from, nl - from), line_start, end - line_start, true));
      } else {
        carry.append(chunk.substr(from, nl - from));
        PTC_RETURN_IF_ERROR(add_line(carry, line_start, end - line_start, true));
        carry.clear();
      }
      line_start = end;
    }
    carry.append(chunk.substr(from));
    pos += got;
    advance(got);
  }
  if (line_start < size) PTC_RETURN_IF_ERROR(add_line(carry, line_start, size - line_start, false));
  return ptc::Status::ok();
}

// PREFIX, PREFIX.bin or PREFIX.idx -> PREFIX.
std::string megatron_prefix(const std::string& path) {
  for (const char* ext : {".bin", ".idx"})
    if (path.size() > 4 && path.compare(path.size() - 4, 4, ext) == 0) return path.substr(0, path.size() - 4);
  return path;
}

}  // namespace

ptc::Result<DatasetIndex> index_dataset(ptc::DatasetFormat format, const std::vector<std::string>& paths,
                                        const IndexProgress& progress) {
  if (paths.empty()) return ptc::invalid("no files given");
  DatasetIndex out;
  out.format = format;
  std::vector<std::string> sources;
  if (format == ptc::DatasetFormat::kJsonl) {
    sources = paths;
  } else {
    std::set<std::string> seen;
    for (const auto& p : paths)
      if (seen.insert(megatron_prefix(p)).second) sources.push_back(megatron_prefix(p));
  }
  for (const auto& p : sources)
    if (p.empty() || p[0] != '/') return ptc::invalid("dataset file '" + p + "' is not an absolute path");

  std::vector<File> files;
  uint64_t total = 0, done = 0;
  for (const auto& src : sources) {
    const std::string path = format == ptc::DatasetFormat::kJsonl ? src : src + ".bin";
    PTC_ASSIGN_OR_RETURN(File f, File::open_read(path));
    PTC_ASSIGN_OR_RETURN(uint64_t size, f.size());
    PTC_ASSIGN_OR_RETURN(int64_t mtime, f.mtime_ns());
    for (const auto& prev : out.files)
      if (prev.path == path) return ptc::invalid(path + " is given twice");
    out.files.push_back({path, size, mtime, 0});
    files.push_back(std::move(f));
    if (format == ptc::DatasetFormat::kJsonl) total += size;
  }
  auto advance = [&](uint64_t n) {
    done += n;
    if (progress) progress(done, total);
  };

  for (size_t i = 0; i < files.size(); ++i) {
    const auto file_no = static_cast<uint32_t>(i);
    if (format == ptc::DatasetFormat::kJsonl) {
      PTC_RETURN_IF_ERROR(index_jsonl(files[i], file_no, out.files[i].size, out, advance));
      continue;
    }
    const std::string idx_path = sources[i] + ".idx";
    PTC_ASSIGN_OR_RETURN(std::string idx, read_small_file(idx_path, kMaxIdxBytes));
    PTC_ASSIGN_OR_RETURN(ptc::MmidxIndex m, ptc::parse_mmidx(idx, out.files[i].size, idx_path));
    if (i == 0) out.dtype_code = m.dtype_code;
    if (m.dtype_code != out.dtype_code)
      return ptc::invalid(idx_path + " holds " + ptc::mmidx_dtype_name(m.dtype_code) + " sequences, " + sources[0] +
                          ".idx " + ptc::mmidx_dtype_name(out.dtype_code) + ": a dataset has one dtype");
    if (out.samples.size() + m.offsets.size() > ptc::kMaxSamples)
      return ptc::invalid("more than " + std::to_string(ptc::kMaxSamples) + " samples");
    for (size_t s = 0; s < m.offsets.size(); ++s) out.samples.push_back({m.offsets[s], m.bytes[s], file_no, 0});
  }
  if (out.samples.empty()) return ptc::invalid("the dataset is empty: its files hold no samples");
  return out;
}

}  // namespace ptcfs
