#include "daemon/dataset/dataset_index.h"

#include <set>

#include "daemon/dataset/jsonl_index.h"
#include "daemon/store/file_util.h"
#include "ptc/formats/mmidx.h"

namespace ptcfs {
namespace {

constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 36;

// PREFIX, PREFIX.bin or PREFIX.idx -> PREFIX.
std::string megatron_prefix(const std::string& path) {
  for (const char* ext : {".bin", ".idx"})
    if (path.size() > 4 && path.compare(path.size() - 4, 4, ext) == 0) return path.substr(0, path.size() - 4);
  return path;
}

}  // namespace

Result<DatasetIndex> index_dataset(ptc::DatasetFormat format, const std::vector<std::string>& paths,
                                   const IndexProgress& progress) {
  if (paths.empty()) return invalid("no files given");
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
    if (p.empty() || p[0] != '/') return invalid("dataset file '" + p + "' is not an absolute path");

  std::vector<File> files;
  uint64_t total = 0, done = 0;
  for (const auto& src : sources) {
    const std::string path = format == ptc::DatasetFormat::kJsonl ? src : src + ".bin";
    PTC_ASSIGN_OR_RETURN(File f, File::open_read(path));
    PTC_ASSIGN_OR_RETURN(uint64_t size, f.size());
    PTC_ASSIGN_OR_RETURN(int64_t mtime, f.mtime_ns());
    for (const auto& prev : out.files)
      if (prev.path == path) return invalid(path + " is given twice");
    out.files.push_back({path, size, mtime, 0});
    files.push_back(std::move(f));
    if (format == ptc::DatasetFormat::kJsonl) total += size;
  }
  auto advance = [&](uint64_t n) {
    done += n;
    if (progress) progress(done, total);
  };

  if (format == ptc::DatasetFormat::kJsonl) {
    std::vector<JsonlInput> inputs;
    for (size_t i = 0; i < files.size(); ++i) inputs.push_back({&files[i], out.files[i].size});
    PTC_RETURN_IF_ERROR(index_jsonl_files(inputs, out.samples, advance));
  }
  for (size_t i = 0; i < files.size() && format == ptc::DatasetFormat::kMegatron; ++i) {
    const auto file_no = static_cast<uint32_t>(i);
    const std::string idx_path = sources[i] + ".idx";
    PTC_ASSIGN_OR_RETURN(std::string idx, read_small_file(idx_path, kMaxIdxBytes));
    PTC_ASSIGN_OR_RETURN(formats::MmidxIndex m, formats::parse_mmidx(idx, out.files[i].size, idx_path));
    if (i == 0) out.dtype_code = m.dtype_code;
    if (m.dtype_code != out.dtype_code)
      return invalid(idx_path + " holds " + formats::mmidx_dtype_name(m.dtype_code) + " sequences, " + sources[0] +
                     ".idx " + formats::mmidx_dtype_name(out.dtype_code) + ": a dataset has one dtype");
    if (out.samples.size() + m.offsets.size() > ptc::kMaxSamples)
      return invalid("more than " + std::to_string(ptc::kMaxSamples) + " samples");
    for (size_t s = 0; s < m.offsets.size(); ++s) out.samples.push_back({m.offsets[s], m.bytes[s], file_no, 0});
  }
  if (out.samples.empty()) return invalid("the dataset is empty: its files hold no samples");
  return out;
}

}  // namespace ptcfs
