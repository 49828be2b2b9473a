#include "daemon/reshard/source_dir.h"

#include <mutex>

#include "daemon/store/file_util.h"

namespace ptcfs {

namespace {

class LocalDir final : public SourceDir {
 public:
  explicit LocalDir(std::string dir) : dir_(std::move(dir)) {}
  std::string where(const std::string& name) const override { return dir_ + "/" + name; }
  Result<std::vector<std::string>> list() override { return list_dir(dir_); }
  Result<std::string> read_small(const std::string& name, uint64_t max_bytes) override {
    return read_small_file(where(name), max_bytes);
  }
  Result<uint64_t> size(const std::string& name) override {
    PTC_ASSIGN_OR_RETURN(const File* f, file(name));
    return f->size();
  }
  Result<size_t> read_at(const std::string& name, uint64_t off, void* buf, size_t len) override {
    PTC_ASSIGN_OR_RETURN(const File* f, file(name));
    return f->read_at(off, buf, len);
  }

 private:
  // Each file opened once (a File is read with pread: one may be read from several threads).
  Result<const File*> file(const std::string& name) {
    std::lock_guard lock(mu_);
    auto it = open_.find(name);
    if (it == open_.end()) {
      PTC_ASSIGN_OR_RETURN(File f, File::open_read(where(name)));
      it = open_.emplace(name, std::move(f)).first;
    }
    return &it->second;
  }

  const std::string dir_;
  std::mutex mu_;  // guards open_ (its Files never move once in)
  std::map<std::string, File> open_;
};

class S3Dir final : public SourceDir {
 public:
  explicit S3Dir(std::unique_ptr<transport::S3Client> c) : c_(std::move(c)) {}
  std::string where(const std::string& name) const override { return c_->where(name); }
  Result<std::vector<std::string>> list() override {
    PTC_RETURN_IF_ERROR(listed());
    std::vector<std::string> names;
    for (const auto& [name, bytes] : sizes_) names.push_back(name);
    return names;
  }
  Result<std::string> read_small(const std::string& name, uint64_t max_bytes) override {
    auto r = c_->get(name, max_bytes);
    if (!r && r.status().code() == Code::kResourceExhausted)
      return invalid(where(name) + ": larger than " + std::to_string(max_bytes) + " bytes");
    return r;
  }
  Result<uint64_t> size(const std::string& name) override {
    PTC_RETURN_IF_ERROR(listed());
    auto it = sizes_.find(name);
    if (it == sizes_.end()) return not_found(where(name) + ": no such object");
    return it->second;
  }
  Result<size_t> read_at(const std::string& name, uint64_t off, void* buf, size_t len) override {
    PTC_ASSIGN_OR_RETURN(const uint64_t n, size(name));
    if (off >= n) return size_t{0};
    const size_t want = static_cast<size_t>(std::min<uint64_t>(len, n - off));
    PTC_RETURN_IF_ERROR(c_->get_range(name, off, buf, want));
    return want;
  }

 private:
  // One listing: the objects directly under the prefix (a deeper key is not a file of the folder).
  Status listed() {
    std::lock_guard lock(mu_);
    if (listed_) return Status::ok();
    PTC_ASSIGN_OR_RETURN(auto objects, c_->list(""));
    for (auto& o : objects)
      if (o.key.find('/') == std::string::npos) sizes_[o.key] = o.size;
    listed_ = true;
    return Status::ok();
  }

  std::unique_ptr<transport::S3Client> c_;
  std::mutex mu_;  // guards the listing (read-only once listed_)
  bool listed_ = false;
  std::map<std::string, uint64_t> sizes_;
};

}  // namespace

Result<std::unique_ptr<SourceDir>> SourceDirs::open(const std::string& dir) const {
  if (dir.rfind("s3://", 0) == 0) {
    if (!s3_)
      return error(Code::kFailedPrecondition,
                   "importing " + dir + ": this daemon has no S3 access (start ptcfsd with --s3-endpoint)");
    PTC_ASSIGN_OR_RETURN(transport::S3Location loc, transport::parse_s3_url(dir));
    PTC_ASSIGN_OR_RETURN(auto c, transport::S3Client::make(s3_->options(loc)));
    return std::unique_ptr<SourceDir>(new S3Dir(std::move(c)));
  }
  if (dir.empty() || dir[0] != '/') return invalid("import directory must be an absolute path, got '" + dir + "'");
  return std::unique_ptr<SourceDir>(new LocalDir(dir));
}

}  // namespace ptcfs
