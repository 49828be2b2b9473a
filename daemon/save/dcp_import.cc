#include "daemon/save/dcp_import.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

#include "daemon/store/parallel.h"
#include "ptc/base/log.h"

namespace ptcfs {

namespace {

constexpr uint64_t kChunk = 16 << 20;        // bytes per ranged read
constexpr uint64_t kMaxMetadata = 64 << 20;  // what the save path keeps of .metadata.tmp
constexpr unsigned kFilesAtOnce = 4;         // .distcp files copied side by side

// One writer's handle of a new file of the step: released in every outcome.
class NewFile {
 public:
  static Result<NewFile> create(fs::WriteTarget& target, const std::string& job, const std::string& step,
                                const std::string& name) {
    PTC_ASSIGN_OR_RETURN(std::shared_ptr<fs::WriteFile> f, target.create(job, step, name));
    PTC_ASSIGN_OR_RETURN(uint64_t writer, f->open_writer());
    return NewFile(std::move(f), writer);
  }
  NewFile(NewFile&& o) noexcept : file_(std::move(o.file_)), writer_(o.writer_) {}
  NewFile& operator=(NewFile&&) = delete;
  ~NewFile() {
    if (file_) file_->release(writer_);
  }
  Status write(uint64_t off, const void* data, size_t len) { return file_->write(writer_, off, data, len); }
  Status close() { return file_->flush(writer_); }

 private:
  NewFile(std::shared_ptr<fs::WriteFile> f, uint64_t writer) : file_(std::move(f)), writer_(writer) {}
  std::shared_ptr<fs::WriteFile> file_;
  uint64_t writer_;
};

// The folder's .distcp names, or the first file that is neither one nor .metadata.
Result<std::vector<std::string>> distcp_files(SourceDir& src) {
  PTC_ASSIGN_OR_RETURN(std::vector<std::string> names, src.list());
  std::vector<std::string> out;
  bool metadata = false;
  for (const auto& n : names) {
    if (n == ".metadata") {
      metadata = true;
    } else if (n.size() > 7 && n.ends_with(".distcp")) {
      out.push_back(n);
    } else {
      return invalid(src.where(n) +
                     ": not a file of a stock DCP save (.metadata and *.distcp only); import a Megatron-Core "
                     "torch_dist or other DCP folder from a local copy of it");
    }
  }
  if (!metadata) return not_found(src.where(".metadata") + " does not exist: not a DCP checkpoint folder");
  if (out.empty()) return invalid(src.where("") + " holds no .distcp file");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<DcpImportSummary> import_dcp_folder(fs::WriteTarget& target, SourceDir& src, const std::string& job,
                                           const std::string& step,
                                           const std::function<Status(const std::string&, const std::string&)>& remove,
                                           const std::function<void(uint64_t, uint64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  PTC_ASSIGN_OR_RETURN(const std::vector<std::string> files, distcp_files(src));
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const auto& f : files) {
    PTC_ASSIGN_OR_RETURN(uint64_t n, src.size(f));
    sizes.push_back(n);
    total += n;
  }
  PTC_ASSIGN_OR_RETURN(const std::string metadata, src.read_small(".metadata", kMaxMetadata));
  total += metadata.size();

  if (Status s = target.make_job(job); !s && s.code() != Code::kAlreadyExists) return s;
  PTC_RETURN_IF_ERROR(target.make_step(job, step));
  std::mutex mu;
  uint64_t done = 0;
  auto copied = [&](uint64_t n) {
    std::lock_guard lock(mu);
    done += n;
    if (progress) progress(done, total);
  };
  auto copy_one = [&](std::vector<char>& buf, size_t i) -> Status {
    PTC_ASSIGN_OR_RETURN(NewFile out, NewFile::create(target, job, step, files[i]));
    for (uint64_t off = 0; off < sizes[i];) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, sizes[i] - off));
      PTC_ASSIGN_OR_RETURN(size_t got, src.read_at(files[i], off, buf.data(), want));
      if (got != want)
        return corrupt(src.where(files[i]) + ": " + std::to_string(off + got) + " bytes where its listing said " +
                       std::to_string(sizes[i]));
      PTC_RETURN_IF_ERROR(out.write(off, buf.data(), got));
      off += got;
      copied(got);
    }
    return out.close();
  };
  Status s = parallel_for(files.size(), kFilesAtOnce, [&]() -> Worker {
    auto buf = std::make_shared<std::vector<char>>(kChunk);
    return [&, buf](size_t i) { return copy_one(*buf, i); };
  });
  if (s) {
    // The commit: .metadata written as the save writes it, then renamed (the conversion runs there).
    s = [&]() -> Status {
      PTC_ASSIGN_OR_RETURN(NewFile out, NewFile::create(target, job, step, ".metadata.tmp"));
      PTC_RETURN_IF_ERROR(out.write(0, metadata.data(), metadata.size()));
      PTC_RETURN_IF_ERROR(out.close());
      copied(metadata.size());
      return Status::ok();
    }();
  }
  if (s) {
    auto committed = target.rename(job, step, ".metadata.tmp", ".metadata");
    s = committed.status();
    if (committed && !*committed) s = internal(job + "/" + step + ": the rename of .metadata did not commit the step");
  }
  if (!s) {
    if (Status r = remove(job, step); !r && r.code() != Code::kNotFound)
      log::warn("removing {}/{} after its import failed: {}", job, step, r.to_string());
    return s.with_context("importing " + src.where("") + " as " + job + "/" + step);
  }
  DcpImportSummary sum;
  sum.files = files.size();
  sum.bytes = total;
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info("imported the DCP folder {} as {}/{}: {} files, {} bytes in {:.2f} s", src.where(""), job, step, sum.files,
            sum.bytes, sum.seconds);
  return sum;
}

}  // namespace ptcfs
