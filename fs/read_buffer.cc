#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fs/read_buffer.h"

#include "fs/scratch_pool.h"

namespace ptcfs::fs {

const std::byte* zero_block() {
  static const auto* z = new std::byte[kZeroBlock]();
  return z;
}

void ReadBuffer::add_mem(const void* p, uint64_t len) {
  if (len == 0) return;
  // Merge with the previous segment when it continues it in memory.
  if (!segs_.empty()) {
    Segment& last = segs_.back();
    if (last.fd < 0 && last.origin_fd < 0 && !last.zeros && last.rows < 0 &&
        last.mem + last.len == static_cast<const std::byte*>(p)) {
      last.len += len;
      size_ += len;
      return;
    }
  }
  segs_.push_back(Segment{static_cast<const std::byte*>(p), -1, 0, len});
  size_ += len;
}

void ReadBuffer::add_mapped(const void* p, uint64_t len, int fd, uint64_t off) {
  if (len == 0) return;
  if (!segs_.empty()) {
    Segment& last = segs_.back();
    if (last.fd < 0 && last.origin_fd == fd && last.origin_off + last.len == off &&
        last.mem + last.len == static_cast<const std::byte*>(p)) {
      last.len += len;
      size_ += len;
      return;
    }
  }
  Segment s{static_cast<const std::byte*>(p), -1, 0, len};
  s.origin_fd = fd;
  s.origin_off = off;
  segs_.push_back(s);
  size_ += len;
}

void ReadBuffer::add_zeros(uint64_t len) {
  while (len > 0) {
    const uint64_t n = std::min(len, kZeroBlock);
    if (!segs_.empty() && segs_.back().zeros && segs_.back().len + n <= kZeroBlock) {
      segs_.back().len += n;  // the zero block is long enough for both
    } else {
      Segment s{zero_block(), -1, 0, n};
      s.zeros = true;
      segs_.push_back(s);
    }
    size_ += n;
    len -= n;
  }
}

void ReadBuffer::add_fd(int fd, uint64_t off, uint64_t len) {
  if (len == 0) return;
  // Merge with the previous segment when it continues it.
  if (!segs_.empty()) {
    Segment& last = segs_.back();
    if (last.fd == fd && last.off + last.len == off) {
      last.len += len;
      size_ += len;
      return;
    }
  }
  segs_.push_back(Segment{nullptr, fd, off, len});
  size_ += len;
}

void ReadBuffer::add_rows(uint64_t rows, const std::vector<RowPiece>& pieces) {
  uint64_t row = 0;
  for (const RowPiece& p : pieces) row += p.len;
  if (rows == 0 || row == 0) return;
  Segment s{nullptr, -1, 0, rows * row};
  s.rows = static_cast<int32_t>(rows_.size());
  rows_.push_back(Rows{rows, pieces});
  segs_.push_back(s);
  size_ += s.len;
}

Status ReadBuffer::copy_to(std::byte* dst) const {
  for (const auto& s : segs_) {
    if (s.rows >= 0) {
      const Rows& r = rows_[static_cast<size_t>(s.rows)];
      for (uint64_t row = 0; row < r.rows; ++row)
        for (const RowPiece& p : r.pieces) {
          if (p.fd < 0)
            std::memset(dst, 0, p.len);
          else
            std::memcpy(dst, p.mem + row * p.stride, p.len);
          dst += p.len;
        }
      continue;
    }
    if (s.fd < 0) {
      std::memcpy(dst, s.mem, s.len);
    } else {
      uint64_t done = 0;
      while (done < s.len) {
        const ssize_t n = ::pread(s.fd, dst + done, s.len - done, static_cast<off_t>(s.off + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io_error("reading blob", errno);
        if (n == 0) return corrupt("blob shorter than its metadata says");
        done += static_cast<uint64_t>(n);
      }
    }
    dst += s.len;
  }
  return Status::ok();
}

Status ReadBuffer::gather_if_fragmented(size_t max_segments, uint64_t min_avg) {
  if (segs_.size() <= max_segments || size_ / segs_.size() >= min_avg) return Status::ok();
  std::shared_ptr<std::byte[]> buf = scratch(size_);
  PTC_RETURN_IF_ERROR(copy_to(buf.get()));
  segs_ = {Segment{buf.get(), -1, 0, size_}};
  rows_.clear();
  keep_ = {std::move(buf)};
  return Status::ok();
}

}  // namespace ptcfs::fs
