#include "daemon/store/blob_store.h"

#include "daemon/store/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <random>

#include "ptc/base/log.h"

namespace ptcfs {

BlobFile::~BlobFile() {
  if (map_) ::munmap(const_cast<std::byte*>(map_), map_len_);
  ::close(fd_);
}

const std::byte* BlobFile::data() const {
  std::call_once(mapped_, [this] {
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return;
    map_ = static_cast<const std::byte*>(p);
    map_len_ = size_;
  });
  return map_;
}

BlobWriter::~BlobWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_ && !path_.empty()) {
    ::unlink(path_.c_str());
    store_->settle(id_);
  }
}

BlobWriter::BlobWriter(BlobWriter&& o) noexcept
    : store_(o.store_), id_(o.id_), fd_(o.fd_), path_(std::move(o.path_)), size_(o.size_), finished_(o.finished_) {
  o.fd_ = -1;
  o.path_.clear();
}

Status BlobWriter::append(const void* data, size_t len) {
  PTC_RETURN_IF_ERROR(write_at(size_, data, len));
  size_ += len;
  return Status::ok();
}

namespace {
constexpr uint64_t kWritebackAtLeast = 4 << 20;
}  // namespace

Status BlobWriter::write_at(uint64_t offset, const void* data, size_t len) const {
  const uint64_t start = offset, total = len;
  auto* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = ::pwrite(fd_, p, len, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOSPC || errno == EDQUOT)
        return error(Code::kResourceExhausted, "the disk holding " + path_ + " is full");
      return io_error("writing blob " + path_, errno);
    }
    p += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  // Start writeback of large writes now so that finish()'s fsync has little left to wait
  // for. Small ones (a FUSE write is at most 1 MiB) skip it: a writeback request per MiB cost
  // the daemon 3x the CPU of the copy when saving into the mount.
  start_writeback(start, total);
  return Status::ok();
}

void BlobWriter::start_writeback(uint64_t offset, uint64_t len) const {
  if (len >= kWritebackAtLeast)
    ::sync_file_range(fd_, static_cast<off_t>(offset), static_cast<off_t>(len), SYNC_FILE_RANGE_WRITE);
}

Result<size_t> BlobWriter::read_at(uint64_t offset, void* data, size_t len) const {
  return read_full(fd_, offset, data, len, "blob " + path_);
}

Status BlobWriter::finish() {
  if (finished_) return Status::ok();  // a save's part prepared again after an abort
  if (::fsync(fd_) != 0) return io_error("syncing blob " + path_, errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return io_error("closing blob " + path_, errno);
  }
  fd_ = -1;
  finished_ = true;
  return Status::ok();
}

Result<std::unique_ptr<BlobStore>> BlobStore::open(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return io_error("creating " + dir, errno);
  return std::unique_ptr<BlobStore>(new BlobStore(dir));
}

std::string BlobStore::path(uint64_t id) const {
  char name[24];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(id));
  return dir_ + "/" + name;
}

Result<BlobWriter> BlobStore::create() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  for (int attempt = 0; attempt < 16; ++attempt) {
    const uint64_t id = rng();
    if (id == 0) continue;  // the zero blob
    const std::string p = path(id);
    // Pending before the file exists: a garbage collection listing the directory between
    // the two would otherwise delete the new blob.
    {
      std::lock_guard lock(mu_);
      if (!pending_.insert(id).second) continue;
    }
    const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return BlobWriter(this, id, fd, p);
    const int err = errno;
    settle(id);
    if (err != EEXIST) return io_error("creating blob " + p, err);
  }
  return internal("could not pick a fresh blob id");
}

Result<uint64_t> BlobStore::create_evicted(uint64_t size) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  for (int attempt = 0; attempt < 16; ++attempt) {
    const uint64_t id = rng();
    if (id == 0) continue;  // the zero blob
    std::lock_guard lock(mu_);
    if (pending_.count(id) || evicted_.count(id) || open_.count(id)) continue;
    struct stat st;
    if (::stat(path(id).c_str(), &st) == 0 || errno != ENOENT) continue;  // a file of that id (or no answer)
    pending_.insert(id);
    evicted_[id] = size;
    return id;
  }
  return internal("could not pick a fresh blob id");
}

void BlobStore::settle(uint64_t id) {
  std::lock_guard lock(mu_);
  pending_.erase(id);
}

void BlobStore::hold_pending(uint64_t id) {
  std::lock_guard lock(mu_);
  pending_.insert(id);
}

bool BlobStore::is_pending(uint64_t id) const {
  std::lock_guard lock(mu_);
  return pending_.count(id) > 0;
}

Result<std::shared_ptr<const BlobFile>> BlobStore::file(uint64_t id) {
  for (;;) {
    std::shared_ptr<Refilling> one;
    std::shared_ptr<const Refill> refill;
    uint64_t tries = 0;
    {
      std::lock_guard lock(mu_);
      if (!evicted_.count(id)) return open_locked(id);
      refill = refill_;
      if (!refill) return unavailable("blob " + path(id) + " is evicted to S3, and this daemon has no S3 tier");
      // One per blob for as long as it lives (remove() drops it): every fetch of it, across
      // evictions, goes through the same lock, so two never write its file at once.
      auto& r = refills_[id];
      if (!r) r = std::make_shared<Refilling>();
      one = r;
      tries = one->tries;
    }
    std::lock_guard refilling(one->m);
    {
      std::lock_guard lock(mu_);
      if (one->tries != tries) {
        // A try ran while this reader waited. It failed: so does this read (the kernel sends a
        // file's reads at once; each trying again would make a stopped S3 cost them one after
        // the other). It succeeded: open it, or start over if it was evicted again since.
        if (!one->failed.is_ok()) return one->failed;
        continue;
      }
      if (!evicted_.count(id)) return open_locked(id);
    }
    const Status s = (*refill)(id);
    std::lock_guard lock(mu_);
    ++one->tries;
    one->failed = s;
    if (!s) return s;
    evicted_.erase(id);
    return open_locked(id);
  }
}

void BlobStore::set_refill(std::shared_ptr<const Refill> refill) {
  std::lock_guard lock(mu_);
  refill_ = std::move(refill);
}

Status BlobStore::evict(uint64_t id, uint64_t size) {
  std::lock_guard lock(mu_);  // a file() either opened it before, or finds it evicted
  const std::string p = path(id);
  if (::unlink(p.c_str()) != 0) return io_error("evicting blob " + p, errno);
  open_.erase(id);
  evicted_[id] = size;
  return Status::ok();
}

void BlobStore::note_evicted(uint64_t id, uint64_t size) {
  std::lock_guard lock(mu_);
  evicted_[id] = size;
}

bool BlobStore::is_evicted(uint64_t id) const {
  std::lock_guard lock(mu_);
  return evicted_.count(id) > 0;
}

std::vector<uint64_t> BlobStore::evicted() const {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> out;
  for (const auto& [id, _] : evicted_) out.push_back(id);
  return out;
}

Result<std::shared_ptr<const BlobFile>> BlobStore::open_locked(uint64_t id) {
  if (auto it = open_.find(id); it != open_.end()) return it->second;
  const std::string p = path(id);
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("opening blob " + p, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return io_error("opening blob " + p, e);
  }
  auto f = std::make_shared<const BlobFile>(id, fd, static_cast<uint64_t>(st.st_size));
  open_.emplace(id, f);
  return f;
}

Status BlobStore::remove(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    open_.erase(id);  // readers holding the shared_ptr keep the fd until they finish
    evicted_.erase(id);
    refills_.erase(id);
  }
  const std::string p = path(id);
  if (::unlink(p.c_str()) != 0 && errno != ENOENT) return io_error("removing blob " + p, errno);
  return Status::ok();
}

Result<std::vector<uint64_t>> BlobStore::list() const {
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return io_error("listing " + dir_, errno);
  std::vector<uint64_t> ids;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() != 16) continue;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(n.c_str(), &end, 16);
    if (end && *end == '\0') ids.push_back(v);
  }
  ::closedir(d);
  return ids;
}

Result<uint64_t> BlobStore::size_of(uint64_t id) const {
  {
    std::lock_guard lock(mu_);
    if (auto it = evicted_.find(id); it != evicted_.end()) return it->second;
  }
  struct stat st {};
  const std::string p = path(id);
  if (::stat(p.c_str(), &st) != 0) return io_error("stat " + p, errno);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace ptcfs
