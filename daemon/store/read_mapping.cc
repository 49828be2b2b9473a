#include "daemon/store/read_mapping.h"

#include <sys/mman.h>

namespace ptcfs {

ReadMapping::ReadMapping(int fd, uint64_t size) : size_(size) {
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
  if (p != MAP_FAILED) map_ = static_cast<const char*>(p);
}

ReadMapping::~ReadMapping() {
  if (map_) ::munmap(const_cast<char*>(map_), size_);
}

}  // namespace ptcfs
