#include "daemon/cluster/slab_digests.h"

namespace ptcfs {

std::optional<uint64_t> SlabDigests::find(const std::shared_ptr<const void>& owner, const std::string& key) const {
  std::lock_guard lock(mu_);
  const auto it = entries_.find({owner.get(), key});
  // The same address may be a new object after the old one went: the weak pointer tells.
  if (it == entries_.end() || it->second.owner.lock() != owner) return std::nullopt;
  return it->second.digest;
}

void SlabDigests::put(const std::shared_ptr<const void>& owner, const std::string& key, uint64_t digest) {
  std::lock_guard lock(mu_);
  if (entries_.size() >= capacity_) entries_.clear();
  entries_.insert_or_assign({owner.get(), key}, Entry{owner, digest});
}

size_t SlabDigests::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace ptcfs
