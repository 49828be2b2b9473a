#include "daemon/cluster/slab_digests.h"

namespace ptcfs {

std::optional<uint64_t> SlabDigests::find(uint64_t version, const std::string& key) const {
  std::lock_guard lock(mu_);
  const auto it = entries_.find({version, key});
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void SlabDigests::put(uint64_t version, const std::string& key, uint64_t digest) {
  std::lock_guard lock(mu_);
  if (entries_.size() >= capacity_) entries_.clear();
  entries_.insert_or_assign({version, key}, digest);
}

size_t SlabDigests::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace ptcfs
