// The XXH3s of the windows this node served lately (serve_slab_read). The replicas of a
// repartition's new layout pull the same windows from the same node (dp=3 sends every byte
// twice): the second reader's digest is found here rather than hashed again, and the sender
// reads those bytes from memory once, to send them, instead of twice. A digest belongs to
// the version object it was computed from: blobs never change, and a step removed and
// imported again is another object (an entry of a version that is gone is never returned).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace ptcfs {

class SlabDigests {
 public:
  explicit SlabDigests(size_t capacity = 4096) : capacity_(capacity) {}
  // The digest put for `key` of `owner`, if `owner` is the same live object it was put with.
  std::optional<uint64_t> find(const std::shared_ptr<const void>& owner, const std::string& key) const;
  // Remembers it; at capacity, everything older is forgotten first.
  void put(const std::shared_ptr<const void>& owner, const std::string& key, uint64_t digest);
  size_t size() const;

 private:
  struct Entry {
    std::weak_ptr<const void> owner;
    uint64_t digest;
  };
  const size_t capacity_;
  mutable std::mutex mu_;  // guards entries_
  std::map<std::pair<const void*, std::string>, Entry> entries_;
};

}  // namespace ptcfs
