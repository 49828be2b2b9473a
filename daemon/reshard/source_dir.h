// The folder an import reads (docs/FORMATS.md "ptc.json"): a local directory, or an S3 prefix
// (s3://bucket/prefix, docs/OPERATIONS.md "The S3 tier") read with the daemon's S3 access:
// listed once, small files read whole, rank files read in ranges (ranged GETs), never
// downloaded whole first.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ptc/base/status.h"
#include "transport/s3_client.h"

namespace ptcfs {

class SourceDir {
 public:
  virtual ~SourceDir() = default;
  // "DIR/name" or "s3://bucket/prefix/name", for messages.
  virtual std::string where(const std::string& name) const = 0;
  // The names of the files directly in it.
  virtual Result<std::vector<std::string>> list() = 0;
  // A whole file of at most max_bytes.
  virtual Result<std::string> read_small(const std::string& name, uint64_t max_bytes) = 0;
  virtual Result<uint64_t> size(const std::string& name) = 0;
  // Up to len bytes from off (fewer only at the file's end).
  virtual Result<size_t> read_at(const std::string& name, uint64_t off, void* buf, size_t len) = 0;
};

// Opens `dir`: an absolute local path, or s3://bucket/prefix when the daemon has S3 access.
class SourceDirs {
 public:
  explicit SourceDirs(std::optional<transport::S3Access> s3 = std::nullopt) : s3_(std::move(s3)) {}
  Result<std::unique_ptr<SourceDir>> open(const std::string& dir) const;
  bool has_s3() const { return s3_.has_value(); }

 private:
  std::optional<transport::S3Access> s3_;
};

// Local folders only (no S3 access).
inline const SourceDirs kLocalSources{};

}  // namespace ptcfs
