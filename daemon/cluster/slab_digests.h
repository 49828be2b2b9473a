// The XXH3s of the windows this node served lately (serve_slab_read). The replicas of a
// repartition's new layout pull the same windows from the same node (dp=3 sends every byte
// twice): the second reader's digest is found here rather than hashed again, and the sender
// reads those bytes from memory once, to send them, instead of twice. A digest belongs to
// the version it was computed from, by its serial (StepVersion::serial(), never reused): blobs
// never change, and a step removed and imported again is another version. Nothing of a
// version is held here: it is released when it is removed (its entries, a few bytes each,
// stay until the capacity clears them; they never answer for another version).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace ptcfs {

class SlabDigests {
 public:
  explicit SlabDigests(size_t capacity = 4096) : capacity_(capacity) {}
  // The digest put for `key` of the version with serial `version`.
  std::optional<uint64_t> find(uint64_t version, const std::string& key) const;
  // Remembers it; at capacity, everything older is forgotten first.
  void put(uint64_t version, const std::string& key, uint64_t digest);
  size_t size() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;  // guards entries_
  std::map<std::pair<uint64_t, std::string>, uint64_t> entries_;
};

}  // namespace ptcfs
