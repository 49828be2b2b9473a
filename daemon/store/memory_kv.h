// A KvStore in memory: the records of a version kept inside another record (a prepared
// change, daemon/store/prepared_record.h) are loaded through it with the code that loads
// committed versions. Not durable.
#pragma once

#include <map>
#include <string>

#include "daemon/store/kv.h"

namespace ptcfs {

class MemoryKv final : public KvStore {
 public:
  Result<std::optional<std::string>> get(std::string_view key) override {
    auto it = map_.find(std::string(key));
    if (it == map_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  Status write(const WriteBatch& batch) override {
    for (const auto& [key, value] : batch.ops()) {
      if (value)
        map_[key] = *value;
      else
        map_.erase(key);
    }
    return Status::ok();
  }
  Status scan(std::string_view prefix, const ScanFn& fn) override {
    for (auto it = map_.lower_bound(std::string(prefix)); it != map_.end() && it->first.starts_with(prefix); ++it)
      PTC_RETURN_IF_ERROR(fn(it->first, it->second));
    return Status::ok();
  }

 private:
  std::map<std::string, std::string> map_;
};

}  // namespace ptcfs
