// One immutable version of a stored dataset (ptc/dataset.h): its spec, its position, and
// where its samples lie. Versions of one dataset share one DatasetSource: the sample table
// (a blob, mapped) and the open source files. Progress and repartitions make new versions
// that change only the position (and, at a repartition with a new global batch, the batch).
//
// Metadata record (JSON):
//   dataset/<job>/<name>  {"version", "created", "format", "seed", "global_batch",
//                          "num_samples", "dtype_code", "dp", "epoch", "consumed",
//                          "batch_offset" (absent in older records: 0),
//                          "files": [{"path", "size", "mtime_ns", "blob"}], "table": blob id,
//                          "table_xxh3", in a cluster also "home": the node holding the files}
// The sample table blob holds one SampleRecord (daemon/store/dataset_records.h) per sample.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/store/blob_store.h"
#include "daemon/store/dataset_records.h"
#include "daemon/store/kv.h"
#include "fs/content.h"

namespace ptcfs {

class DatasetVersion;

// Reads samples of a dataset whose files another node holds (daemon/cluster/peer_reader.h).
class RemoteSamples {
 public:
  virtual ~RemoteSamples() = default;
  virtual const std::string& self_id() const = 0;
  virtual Status read_samples(const DatasetVersion& v, const std::vector<fs::DatasetContent::Piece>& pieces,
                              fs::ReadBuffer& out) const = 0;
};

// The sample table and the source files of a dataset.
class DatasetSource {
 public:
  // Maps the table (checking its size against num_samples) and, when `local`, opens the
  // files. A source file that is missing or changed since it was indexed is not an error
  // here: reads of its samples fail, naming it.
  static Result<std::shared_ptr<const DatasetSource>> open(BlobStore& blobs, uint64_t table, uint64_t table_xxh3,
                                                           std::vector<SourceFile> files, uint64_t num_samples,
                                                           bool local);
  const SampleRecord& sample(uint32_t s) const { return records_[s]; }
  uint64_t num_samples() const { return num_samples_; }
  uint64_t table() const { return table_id_; }
  uint64_t table_xxh3() const { return table_xxh3_; }
  const std::vector<SourceFile>& files() const { return files_; }
  bool local() const { return local_; }
  // The table's bytes.
  std::string_view table_bytes() const;
  // Appends the bytes of each piece from the local files.
  Status read(const std::vector<fs::DatasetContent::Piece>& pieces, fs::ReadBuffer& out) const;

 private:
  // Reads n bytes at `off` of sample r from its file into dst.
  Status pread_piece(const SampleRecord& r, uint64_t off, uint64_t n, char* dst) const;

  // Whether the files of these pieces are still at least as long as when added.
  bool sizes_unchanged(const std::vector<const fs::DatasetContent::Piece*>& pieces) const;

  struct Opened {
    int fd = -1;
    const char* map = nullptr;          // the file mapped read-only, when it could be mapped
    std::shared_ptr<const void> owner;  // keeps fd open and map mapped
    Status error;                       // why its samples cannot be read
  };
  uint64_t table_id_ = 0, table_xxh3_ = 0, num_samples_ = 0;
  std::shared_ptr<const BlobFile> table_;
  const SampleRecord* records_ = nullptr;
  std::vector<SourceFile> files_;
  std::vector<Opened> opened_;
  bool local_ = false;
};

class DatasetVersion final : public fs::DatasetContent {
 public:
  DatasetVersion(std::string job, std::string name, uint64_t version, int64_t created, ptc::DatasetSpec spec,
                 int dtype_code, ptc::DatasetPosition pos, std::shared_ptr<const DatasetSource> source,
                 std::string home = {}, const RemoteSamples* remote = nullptr);

  const std::string& job() const { return job_; }
  const std::string& name() const { return name_; }
  const std::string& home() const { return home_; }
  const ptc::DatasetSpec& spec() const override { return spec_; }
  const ptc::DatasetPosition& position() const override { return pos_; }
  int dtype_code() const override { return dtype_code_; }
  uint64_t version() const override { return version_; }
  int64_t mtime() const override { return created_; }
  const std::vector<uint32_t>& order() const override;
  uint64_t record_bytes(uint32_t sample) const override { return ptcfs::record_bytes(source_->sample(sample)); }
  Status read_records(const std::vector<Piece>& pieces, fs::ReadBuffer& out) const override;

  const DatasetSource& source() const { return *source_; }
  // A new version at another position (same samples): `version`, or this one's plus one;
  // `global_batch` (0: this one's) is its global batch (ptc::rebatched gives both).
  std::shared_ptr<DatasetVersion> with_position(const ptc::DatasetPosition& pos, uint64_t version = 0,
                                                uint64_t global_batch = 0) const;
  std::vector<uint64_t> blobs_used() const;

  // The record (its value) and adding it to a batch.
  nlohmann::json to_json() const;
  void to_records(WriteBatch& batch) const;
  static std::string key(const std::string& job, const std::string& name);
  static constexpr std::string_view kPrefix = "dataset/";
  // Loads a version from its record.
  static Result<std::shared_ptr<DatasetVersion>> load(const std::string& job, const std::string& name,
                                                      std::string_view record, BlobStore& blobs,
                                                      const RemoteSamples* remote);

 private:
  std::string job_, name_;
  uint64_t version_;
  int64_t created_;
  ptc::DatasetSpec spec_;
  int dtype_code_;
  ptc::DatasetPosition pos_;
  std::shared_ptr<const DatasetSource> source_;
  std::string home_;
  const RemoteSamples* remote_;
  mutable std::once_flag order_once_;
  mutable std::vector<uint32_t> order_;
};

// Whether a dataset whose files are on `home` is read locally on this node.
bool is_local_home(const std::string& home, const RemoteSamples* remote);

}  // namespace ptcfs
