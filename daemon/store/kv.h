// The metadata key-value store behind an interface. Only daemon/ sees it, and only
// rocksdb_kv.cc knows RocksDB; its Status is converted at once.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs {

// A set of puts and deletes applied atomically and durably (synced) by KvStore::write.
class WriteBatch {
 public:
  void put(std::string key, std::string value) { ops_.emplace_back(std::move(key), std::move(value)); }
  void del(std::string key) { ops_.emplace_back(std::move(key), std::nullopt); }
  const auto& ops() const { return ops_; }
  bool empty() const { return ops_.empty(); }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> ops_;
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  // nullopt when absent.
  virtual ptc::Result<std::optional<std::string>> get(std::string_view key) = 0;
  // All or nothing, synced to disk before it returns.
  virtual ptc::Status write(const WriteBatch& batch) = 0;
  // Calls fn for each key starting with prefix, in key order, until fn returns false.
  virtual ptc::Status scan(std::string_view prefix,
                           const std::function<bool(std::string_view key, std::string_view value)>& fn) = 0;
};

// Opens (creating if needed) a RocksDB database at path.
ptc::Result<std::unique_ptr<KvStore>> open_rocksdb(const std::string& path);

}  // namespace ptcfs
