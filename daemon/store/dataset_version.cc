#include "daemon/store/dataset_version.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "daemon/store/checksum.h"
#include "daemon/store/file_util.h"
#include "daemon/store/guarded_copy.h"
#include "daemon/store/read_mapping.h"
#include "fs/scratch_pool.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"

namespace ptcfs {

using nlohmann::json;

namespace {

// A source file and its read-only mapping (null when empty or when mmap failed: then the
// file is read with pread).
class MappedSource {
 public:
  MappedSource(File file, uint64_t size) : file_(std::move(file)), map_(file_.fd(), size) {}
  const File& file() const { return file_; }
  const char* map() const { return map_.data(); }

 private:
  File file_;
  ReadMapping map_;
};

}  // namespace

bool is_local_home(const std::string& home, const RemoteSamples* remote) {
  return home.empty() || !remote || home == remote->self_id();
}

Result<std::shared_ptr<const DatasetSource>> DatasetSource::open(BlobStore& blobs, uint64_t table, uint64_t table_xxh3,
                                                                 std::vector<SourceFile> files, uint64_t num_samples,
                                                                 bool local) {
  auto s = std::make_shared<DatasetSource>();
  s->table_id_ = table;
  s->table_xxh3_ = table_xxh3;
  s->num_samples_ = num_samples;
  s->local_ = local;
  PTC_ASSIGN_OR_RETURN(s->table_, blobs.file(table));
  if (!s->table_->data() || s->table_->mapped_size() != num_samples * sizeof(SampleRecord))
    return corrupt("sample table blob " + std::to_string(table) + " does not hold " + std::to_string(num_samples) +
                   " samples");
  s->records_ = reinterpret_cast<const SampleRecord*>(s->table_->data());
  for (uint64_t i = 0; i < num_samples; ++i)
    if (s->records_[i].file >= files.size())
      return corrupt("sample table blob " + std::to_string(table) + ": sample " + std::to_string(i) + " names file " +
                     std::to_string(s->records_[i].file) + " of " + std::to_string(files.size()));
  s->files_ = std::move(files);
  s->opened_.resize(s->files_.size());
  if (!local) return std::shared_ptr<const DatasetSource>(std::move(s));
  for (size_t i = 0; i < s->files_.size(); ++i) {
    const SourceFile& f = s->files_[i];
    Opened& o = s->opened_[i];
    if (f.blob != 0) {
      auto b = blobs.file(f.blob);
      if (!b) {
        o.error = error(Code::kIo, "the copy of " + f.path + " is unreadable: " + b.status().message());
        continue;
      }
      o.fd = (*b)->fd();
      if ((*b)->data() && (*b)->mapped_size() >= f.size) o.map = reinterpret_cast<const char*>((*b)->data());
      o.owner = *b;
      continue;
    }
    auto opened = File::open_read(f.path);
    if (!opened) {
      o.error = error(Code::kIo, "dataset file " + f.path + " cannot be opened: " + opened.status().message());
      continue;
    }
    auto size = opened->size();
    auto mtime = opened->mtime_ns();
    if (!size || !mtime || *size != f.size || *mtime != f.mtime_ns) {
      o.error = corrupt("dataset file " + f.path + " changed since it was added (it had " + std::to_string(f.size) +
                        " bytes; add the dataset again, or use --copy to keep a copy)");
      continue;
    }
    auto source = std::make_shared<MappedSource>(std::move(opened).value(), f.size);
    o.fd = source->file().fd();
    o.map = source->map();
    o.owner = std::move(source);
  }
  for (const auto& o : s->opened_)
    if (!o.error) log::warn("{}", o.error.message());
  return std::shared_ptr<const DatasetSource>(std::move(s));
}

std::string_view DatasetSource::table_bytes() const {
  return {reinterpret_cast<const char*>(records_), num_samples_ * sizeof(SampleRecord)};
}

namespace {
// Pieces smaller than this are copied into one buffer, so that a read of many short records
// is one memory segment rather than a splice per record.
constexpr uint64_t kGatherBelow = 64 << 10;
}  // namespace

Status DatasetSource::pread_piece(const SampleRecord& r, uint64_t off, uint64_t n, char* dst) const {
  const Opened& o = opened_[r.file];
  for (uint64_t done = 0; done < n;) {
    const ssize_t got = ::pread(o.fd, dst + done, n - done, static_cast<off_t>(r.offset + off + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return io_error("reading dataset file " + files_[r.file].path, errno);
    if (got == 0) return corrupt("dataset file " + files_[r.file].path + " is shorter than when it was added");
    done += static_cast<uint64_t>(got);
  }
  return Status::ok();
}

bool DatasetSource::sizes_unchanged(const std::vector<const fs::DatasetContent::Piece*>& pieces) const {
  std::vector<bool> checked(files_.size(), false);  // each file once per read
  for (const auto* p : pieces) {
    const uint32_t file = records_[p->sample].file;
    if (checked[file]) continue;
    struct stat st {};
    if (::fstat(opened_[file].fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < files_[file].size) return false;
    checked[file] = true;
  }
  return true;
}

Status DatasetSource::read(const std::vector<fs::DatasetContent::Piece>& pieces, fs::ReadBuffer& out) const {
  static const char kNewline = '\n';
  // The bytes of a piece that lie in its file; past them is the supplied newline.
  auto in_file = [&](const fs::DatasetContent::Piece& p, const SampleRecord& r) {
    return p.off < r.bytes ? std::min(p.len, r.bytes - p.off) : 0;
  };
  uint64_t small = 0;  // bytes to gather
  for (const auto& p : pieces) {
    if (p.sample >= num_samples_) return error(Code::kOutOfRange, "no sample " + std::to_string(p.sample));
    const SampleRecord& r = records_[p.sample];
    if (p.off + p.len > ptcfs::record_bytes(r) || p.off + p.len < p.off)
      return error(Code::kOutOfRange, "bytes past the end of sample " + std::to_string(p.sample));
    const uint64_t n = in_file(p, r);
    small += (n < kGatherBelow ? n : 0) + (p.len - n);
  }
  // Sized once, so that pointers into it stay valid; every byte of it is written below.
  std::shared_ptr<std::byte[]> gather_mem = small ? fs::scratch(small) : nullptr;
  char* gather = reinterpret_cast<char*>(gather_mem.get());
  size_t used = 0;
  const void* kept = nullptr;
  // Copies out of mapped files, done together under one SIGBUS guard: the piece of each.
  std::vector<CopyRun> runs;
  std::vector<const fs::DatasetContent::Piece*> run_pieces;
  for (const auto& p : pieces) {
    const SampleRecord& r = records_[p.sample];
    const Opened& o = opened_[r.file];
    if (o.fd < 0) return o.error.is_ok() ? internal("dataset file not open") : o.error;
    if (const uint64_t n = in_file(p, r); n > 0) {
      if (n >= kGatherBelow) {
        out.add_fd(o.fd, r.offset + p.off, n);
        if (o.owner.get() != kept) {  // the segment reads the fd after this returns
          out.keep(o.owner);
          kept = o.owner.get();
        }
      } else {
        if (o.map) {
          runs.push_back({gather + used, o.map + r.offset + p.off, n});
          run_pieces.push_back(&p);
        } else {
          PTC_RETURN_IF_ERROR(pread_piece(r, p.off, n, gather + used));
        }
        out.add_mem(gather + used, n);
        used += n;
      }
    }
    if (p.off + p.len > r.bytes) {  // the supplied newline
      gather[used] = kNewline;
      out.add_mem(gather + used, 1);
      ++used;
    }
  }
  // A file truncated since it was mapped (its last page would read as zeros, the pages past
  // it raise SIGBUS): read those pieces again with pread, which names the file.
  if (!runs.empty() && (!sizes_unchanged(run_pieces) || !copy_guarded(runs.data(), runs.size())))
    for (size_t i = 0; i < runs.size(); ++i) {
      const fs::DatasetContent::Piece& p = *run_pieces[i];
      PTC_RETURN_IF_ERROR(pread_piece(records_[p.sample], p.off, runs[i].len, static_cast<char*>(runs[i].dst)));
    }
  if (gather_mem) out.keep(std::move(gather_mem));
  return Status::ok();
}

DatasetVersion::DatasetVersion(std::string job, std::string name, uint64_t version, int64_t created,
                               ptc::DatasetSpec spec, int dtype_code, ptc::DatasetPosition pos,
                               std::shared_ptr<const DatasetSource> source, std::string home,
                               const RemoteSamples* remote)
    : job_(std::move(job)),
      name_(std::move(name)),
      version_(version),
      created_(created),
      spec_(spec),
      dtype_code_(dtype_code),
      pos_(pos),
      source_(std::move(source)),
      home_(std::move(home)),
      remote_(remote) {}

const std::vector<uint32_t>& DatasetVersion::order() const {
  std::call_once(order_once_, [&] { order_ = ptc::epoch_order(spec_.seed, pos_.epoch, spec_.num_samples); });
  return order_;
}

Status DatasetVersion::read_records(const std::vector<Piece>& pieces, fs::ReadBuffer& out) const {
  if (source_->local()) return source_->read(pieces, out);
  if (!remote_)
    return error(Code::kUnavailable, "the files of dataset " + job_ + "/" + name_ + " are on node " + home_);
  return remote_->read_samples(*this, pieces, out);
}

std::shared_ptr<DatasetVersion> DatasetVersion::with_position(const ptc::DatasetPosition& pos, uint64_t version,
                                                              uint64_t global_batch) const {
  ptc::DatasetSpec spec = spec_;
  if (global_batch) spec.global_batch = global_batch;
  return std::make_shared<DatasetVersion>(job_, name_, version ? version : version_ + 1,
                                          static_cast<int64_t>(::time(nullptr)), spec, dtype_code_, pos, source_, home_,
                                          remote_);
}

std::vector<uint64_t> DatasetVersion::blobs_used() const {
  std::vector<uint64_t> out{source_->table()};
  for (const auto& f : source_->files())
    if (f.blob) out.push_back(f.blob);
  return out;
}

std::string DatasetVersion::key(const std::string& job, const std::string& name) {
  return std::string(kPrefix) + job + "/" + name;
}

json DatasetVersion::to_json() const {
  json files = json::array();
  for (const auto& f : source_->files())
    files.push_back({{"path", f.path}, {"size", f.size}, {"mtime_ns", f.mtime_ns}, {"blob", f.blob}});
  json j = {{"version", version_},
            {"created", created_},
            {"format", ptc::format_name(spec_.format)},
            {"seed", spec_.seed},
            {"global_batch", spec_.global_batch},
            {"num_samples", spec_.num_samples},
            {"dtype_code", dtype_code_},
            {"dp", pos_.dp},
            {"epoch", pos_.epoch},
            {"consumed", pos_.consumed},
            {"batch_offset", pos_.batch_offset},
            {"files", std::move(files)},
            {"table", source_->table()},
            {"table_xxh3", source_->table_xxh3()}};
  if (!home_.empty()) j["home"] = home_;
  return j;
}

void DatasetVersion::to_records(WriteBatch& batch) const { batch.put(key(job_, name_), to_json().dump()); }

Result<std::shared_ptr<DatasetVersion>> DatasetVersion::load(const std::string& job, const std::string& name,
                                                             std::string_view record, BlobStore& blobs,
                                                             const RemoteSamples* remote) {
  const std::string where = "metadata of dataset " + job + "/" + name;
  PTC_ASSIGN_OR_RETURN(json j, parse_json(record, where, Code::kCorrupt));
  auto u64 = [&](const char* k) -> Result<uint64_t> {
    if (!j.contains(k) || !j[k].is_number_unsigned()) return corrupt(where + ": bad '" + k + "'");
    return j[k].get<uint64_t>();
  };
  ptc::DatasetSpec spec;
  ptc::DatasetPosition pos;
  PTC_ASSIGN_OR_RETURN(uint64_t version, u64("version"));
  PTC_ASSIGN_OR_RETURN(uint64_t created, u64("created"));
  PTC_ASSIGN_OR_RETURN(spec.seed, u64("seed"));
  PTC_ASSIGN_OR_RETURN(spec.global_batch, u64("global_batch"));
  PTC_ASSIGN_OR_RETURN(spec.num_samples, u64("num_samples"));
  PTC_ASSIGN_OR_RETURN(uint64_t dtype, u64("dtype_code"));
  PTC_ASSIGN_OR_RETURN(uint64_t dp, u64("dp"));
  PTC_ASSIGN_OR_RETURN(pos.epoch, u64("epoch"));
  PTC_ASSIGN_OR_RETURN(pos.consumed, u64("consumed"));
  if (j.contains("batch_offset")) {  // absent in records written before it existed: 0
    PTC_ASSIGN_OR_RETURN(pos.batch_offset, u64("batch_offset"));
  }
  PTC_ASSIGN_OR_RETURN(uint64_t table, u64("table"));
  PTC_ASSIGN_OR_RETURN(uint64_t table_xxh3, u64("table_xxh3"));
  if (dp > INT32_MAX) return corrupt(where + ": bad 'dp'");
  pos.dp = static_cast<int>(dp);
  if (!j.contains("format") || !j["format"].is_string()) return corrupt(where + ": bad 'format'");
  auto format = ptc::parse_dataset_format(j["format"].get<std::string>());
  if (!format) return corrupt(where + ": " + format.status().message());
  spec.format = *format;
  if (auto s = ptc::check_spec(spec); !s) return corrupt(where + ": " + s.message());
  if (auto s = ptc::check_position(spec, pos); !s) return corrupt(where + ": " + s.message());
  std::vector<SourceFile> files;
  if (!j.contains("files") || !j["files"].is_array()) return corrupt(where + ": bad 'files'");
  for (const auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("size") ||
        !f["size"].is_number_unsigned() || !f.contains("mtime_ns") || !f["mtime_ns"].is_number_integer() ||
        !f.contains("blob") || !f["blob"].is_number_unsigned())
      return corrupt(where + ": bad entry in 'files'");
    files.push_back({f["path"].get<std::string>(), f["size"].get<uint64_t>(), f["mtime_ns"].get<int64_t>(),
                     f["blob"].get<uint64_t>()});
  }
  std::string home;
  if (j.contains("home")) {
    if (!j["home"].is_string()) return corrupt(where + ": bad 'home'");
    home = j["home"].get<std::string>();
  }
  PTC_ASSIGN_OR_RETURN(auto source, DatasetSource::open(blobs, table, table_xxh3, std::move(files), spec.num_samples,
                                                        is_local_home(home, remote)));
  return std::make_shared<DatasetVersion>(job, name, version, static_cast<int64_t>(created), spec,
                                          static_cast<int>(dtype), pos, std::move(source), std::move(home), remote);
}

}  // namespace ptcfs
