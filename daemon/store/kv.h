// The metadata key-value store behind an interface. Only daemon/ sees it, and only
// rocksdb_kv.cc knows RocksDB; its Status is converted at once.
//
// Thread-safety: every method may be called from any thread (MemoryKv, for tests and for
// decoding records, is not thread-safe). Errors: kIo (RocksDB's IO errors, "metadata
// write"/"metadata scan"), kCorrupt (its corruption), each naming the operation.
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
  virtual Result<std::optional<std::string>> get(std::string_view key) = 0;
  // All or nothing, synced to disk before it returns.
  virtual Status write(const WriteBatch& batch) = 0;
  // Called by scan for each record; an error stops the scan, which returns it.
  using ScanFn = std::function<Status(std::string_view key, std::string_view value)>;
  // Calls fn for each key starting with prefix, in key order, until fn returns an error (then
  // returned). RocksDB: the scan sees a snapshot taken when it starts; writes made meanwhile
  // (also from fn) are not seen. MemoryKv: no snapshot, and fn must not write to it.
  virtual Status scan(std::string_view prefix, const ScanFn& fn) = 0;
};

// Opens (creating if needed) a RocksDB database at path.
Result<std::unique_ptr<KvStore>> open_rocksdb(const std::string& path);

}  // namespace ptcfs
