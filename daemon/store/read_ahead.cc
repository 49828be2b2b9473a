#include "daemon/store/read_ahead.h"

#include <fcntl.h>

#include <algorithm>
#include <unordered_map>

namespace ptcfs {

namespace {

constexpr uint64_t kPage = 4096;

void fadvise_willneed(int fd, uint64_t off, uint64_t len) {
  (void)::posix_fadvise(fd, static_cast<off_t>(off), static_cast<off_t>(len), POSIX_FADV_WILLNEED);
}

}  // namespace

ReadAhead::ReadAhead(Advise advise) : advise_(advise ? std::move(advise) : Advise(fadvise_willneed)) {}

void ReadAhead::add(int fd, uint64_t off, uint64_t len) {
  if (len == 0 || fd < 0) return;
  const uint64_t begin = off / kPage * kPage, end = (off + len + kPage - 1) / kPage * kPage;
  if (!ranges_.empty()) {
    Range& last = ranges_.back();
    if (last.fd == fd && begin <= last.end && end >= last.begin) {
      last.begin = std::min(last.begin, begin);
      last.end = std::max(last.end, end);
      return;
    }
  }
  ranges_.push_back(Range{fd, begin, end});
}

void ReadAhead::flush() {
  std::unordered_map<int, size_t> of_file;
  for (const Range& r : ranges_) ++of_file[r.fd];
  for (const Range& r : ranges_)
    if (of_file[r.fd] > 1) advise_(r.fd, r.begin, r.end - r.begin);
  ranges_.clear();
}

}  // namespace ptcfs
