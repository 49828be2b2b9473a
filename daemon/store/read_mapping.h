// A read-only shared mapping of the first `size` bytes of an open file, for reading files
// ptcfs does not own in place (docs/ARCHITECTURE.md "Datasets"). Null when `size` is 0 or
// mmap failed; callers then read with pread. Touching it where the file has been cut short
// raises SIGBUS: read it under daemon/store/guarded_copy.h.
#pragma once

#include <cstdint>

namespace ptcfs {

class ReadMapping {
 public:
  ReadMapping(int fd, uint64_t size);
  ReadMapping(const ReadMapping&) = delete;
  ReadMapping& operator=(const ReadMapping&) = delete;
  ~ReadMapping();
  const char* data() const { return map_; }
  uint64_t size() const { return size_; }

 private:
  const char* map_ = nullptr;
  uint64_t size_;
};

}  // namespace ptcfs
