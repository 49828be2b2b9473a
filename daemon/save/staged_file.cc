#include "daemon/save/staged_file.h"

#include <cstring>

namespace ptcfs {

namespace {

constexpr uint64_t kMaxMetadata = 64 << 20;

Status busy(const std::string& why) { return error(Code::kFailedPrecondition, why); }

}  // namespace

uint64_t StagedFile::size() const {
  std::lock_guard lock(mu_);
  return end_;
}

Result<uint64_t> StagedFile::open_writer() {
  std::lock_guard lock(mu_);
  if (dead_ || sealed_) return error(Code::kPermissionDenied, where_ + " is no longer written");
  // A writer that closed it and opens it again before the kernel's release of the first handle
  // is the same writer: torch opens each file once, so a second handle is another writer.
  if (owner_ != 0 && !closed_) return busy(where_ + " is open for writing by another writer");
  owner_ = ++last_;
  closed_ = false;
  return owner_;
}

Status StagedFile::write(uint64_t writer, uint64_t off, const void* data, size_t len) {
  std::unique_lock lock(mu_);
  if (dead_ || sealed_) return error(Code::kPermissionDenied, where_ + " is no longer written");
  if (writer != owner_) return busy(where_ + ": a write through a handle that no longer holds the file");
  if (off + len < off) return invalid(where_ + ": a write past 2^64 bytes");
  closed_ = false;
  if (!blob_) {
    if (off + len > kMaxMetadata) return invalid(where_ + ": past 64 MiB (a file kept in memory)");
    if (text_.size() < off + len) text_.resize(off + len);
    std::memcpy(text_.data() + off, data, len);
  } else {
    auto blob = blob_;
    lock.unlock();  // the bytes go to the blob outside the lock; one writer, so no other range moves
    PTC_RETURN_IF_ERROR(blob->write_at(off, data, len));
    lock.lock();
  }
  written_.add(off, off + len);
  end_ = std::max(end_, off + len);
  return Status::ok();
}

Status StagedFile::truncate(uint64_t writer, uint64_t size) {
  std::lock_guard lock(mu_);
  if (dead_ || sealed_) return error(Code::kPermissionDenied, where_ + " is no longer written");
  if (writer != 0 && writer != owner_) return busy(where_ + ": truncated through a handle that does not hold it");
  // torch opens with O_TRUNC (size 0) once, safetensors sizes a new file before writing it; a file
  // cut elsewhere would leave bytes in its blob that a later write past them does not replace.
  if (size == 0) {
    written_.clear();
    end_ = 0;
    text_.clear();
    return Status::ok();
  }
  if (size < end_) return invalid(where_ + ": a staged file is only truncated to 0 bytes or extended");
  if (!blob_ && size > kMaxMetadata) return invalid(where_ + ": past 64 MiB (a file kept in memory)");
  if (!blob_) text_.resize(size);
  end_ = size;  // the bytes up to it still have to be written (seal checks)
  return Status::ok();
}

Status StagedFile::flush(uint64_t writer) {
  {
    std::lock_guard lock(mu_);
    if (writer != owner_ || dead_ || sealed_) return Status::ok();
    closed_ = true;
  }
  return on_close_ ? on_close_() : Status::ok();
}

bool StagedFile::closed() const {
  std::lock_guard lock(mu_);
  return owner_ == 0 || closed_;
}

void StagedFile::release(uint64_t writer) {
  std::lock_guard lock(mu_);
  if (writer == owner_) {
    owner_ = 0;
    closed_ = true;
  }
  if (dead_ && owner_ == 0) blob_.reset();
}

Result<uint64_t> StagedFile::seal() {
  std::lock_guard lock(mu_);
  if (dead_) return error(Code::kPermissionDenied, where_ + " was removed");
  if (owner_ != 0 && !closed_) return busy(where_ + " is still open for writing");
  if (!written_.covers(0, end_))
    return invalid(where_ + ": only " + std::to_string(written_.covered(0, end_)) + " of its " + std::to_string(end_) +
                   " bytes were written");
  sealed_ = true;
  return end_;
}

Result<std::string> StagedFile::read(uint64_t off, uint64_t len) const {
  std::shared_ptr<BlobWriter> blob;
  {
    std::lock_guard lock(mu_);
    if (!sealed_ || dead_) return error(Code::kFailedPrecondition, where_ + " is not sealed");
    if (off > end_ || len > end_ - off)
      return invalid(where_ + ": a read of [" + std::to_string(off) + ", +" + std::to_string(len) + ") past its " +
                     std::to_string(end_) + " bytes");
    if (!blob_) return text_.substr(off, len);
    blob = blob_;
  }
  std::string out(len, '\0');
  PTC_ASSIGN_OR_RETURN(size_t n, blob->read_at(off, out.data(), len));
  if (n != len) return io_error(where_ + ": its blob is shorter than written", EIO);
  return out;
}

void StagedFile::kill() {
  std::lock_guard lock(mu_);
  dead_ = true;
  if (owner_ == 0) blob_.reset();
}

std::string StagedFile::text() const {
  std::lock_guard lock(mu_);
  return text_;
}

}  // namespace ptcfs
