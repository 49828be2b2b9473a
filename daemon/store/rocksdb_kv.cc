#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "daemon/store/kv.h"

namespace ptcfs {
namespace {

Status convert(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::ok();
  if (s.IsNotFound()) return not_found(what + ": " + s.ToString());
  if (s.IsCorruption()) return corrupt(what + ": " + s.ToString());
  if (s.IsIOError()) return error(Code::kIo, what + ": " + s.ToString());
  return internal(what + ": " + s.ToString());
}

class RocksKv final : public KvStore {
 public:
  explicit RocksKv(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}

  Result<std::optional<std::string>> get(std::string_view key) override {
    std::string value;
    auto s = db_->Get(rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &value);
    if (s.IsNotFound()) return std::optional<std::string>();
    if (!s.ok()) return convert(s, "metadata get '" + std::string(key) + "'");
    return std::optional<std::string>(std::move(value));
  }

  Status write(const WriteBatch& batch) override {
    rocksdb::WriteBatch wb;
    for (const auto& [k, v] : batch.ops()) {
      auto s = v ? wb.Put(k, *v) : wb.Delete(k);
      if (!s.ok()) return convert(s, "metadata batch");
    }
    rocksdb::WriteOptions wo;
    wo.sync = true;
    return convert(db_->Write(wo, &wb), "metadata write");
  }

  Status scan(std::string_view prefix, const ScanFn& fn) override {
    // An iterator reads the database as of its creation (an implicit snapshot).
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    const rocksdb::Slice p(prefix.data(), prefix.size());
    for (it->Seek(p); it->Valid() && it->key().starts_with(p); it->Next()) {
      PTC_RETURN_IF_ERROR(fn(std::string_view(it->key().data(), it->key().size()),
                             std::string_view(it->value().data(), it->value().size())));
    }
    return convert(it->status(), "metadata scan");
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace

Result<std::unique_ptr<KvStore>> open_rocksdb(const std::string& path) {
  rocksdb::Options opts;
  opts.create_if_missing = true;
  opts.keep_log_file_num = 4;
  opts.max_log_file_size = 8 << 20;
  // The memtable is the daemon's memory until it is flushed: RocksDB's 64 MB default let a step
  // of 100,000 tensors, whose records are rewritten at every change, hold 128 MB more after a few
  // changes than after its import (docs/OPERATIONS.md "Memory"). Metadata flushes are cheap.
  opts.write_buffer_size = 16 << 20;
  rocksdb::DB* raw = nullptr;
  auto s = rocksdb::DB::Open(opts, path, &raw);
  if (!s.ok()) return convert(s, "opening metadata database " + path);
  return std::unique_ptr<KvStore>(new RocksKv(std::unique_ptr<rocksdb::DB>(raw)));
}

}  // namespace ptcfs
