// What the filesystem needs from the node, as small interfaces that daemon/ implements
// over its store (fs/ knows nothing of RocksDB or blobs).
//
// A StepContent is one immutable version of a step: its layout and the bytes of every
// stored slice. The filesystem keeps a shared_ptr to the version a file was opened on, so
// a reader keeps reading that version after a later repartition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ptc/dataset.h"
#include "ptc/layout.h"
#include "ptc/status.h"

namespace ptcfs::fs {

// The bytes of one read reply, as a list of segments: memory, or a range of a file
// descriptor (libfuse splices it where it can, else reads it). Segments are in reply order.
class ReadBuffer {
 public:
  struct Segment {
    const std::byte* mem = nullptr;  // when fd < 0
    int fd = -1;
    uint64_t off = 0;                // in fd
    uint64_t len = 0;
  };

  // Memory that outlives the reply (owned by a view or static).
  void add_mem(const void* p, uint64_t len);
  // Zeros (padding).
  void add_zeros(uint64_t len);
  void add_fd(int fd, uint64_t off, uint64_t len);
  // Keeps an owner (an open blob) alive until the buffer is destroyed.
  void keep(std::shared_ptr<const void> owner) { keep_.push_back(std::move(owner)); }

  const std::vector<Segment>& segments() const { return segs_; }
  uint64_t size() const { return size_; }
  // Reads every segment into dst (size() bytes).
  ptc::Status copy_to(std::byte* dst) const;

 private:
  std::vector<Segment> segs_;
  std::vector<std::shared_ptr<const void>> keep_;
  uint64_t size_ = 0;
};

class StepContent {
 public:
  virtual ~StepContent() = default;
  virtual const ptc::Layout& layout() const = 0;
  // Increases with every new version of the same step.
  virtual uint64_t version() const = 0;
  // When this version was committed, in seconds since the epoch (the files' mtime).
  virtual int64_t mtime() const = 0;
  // Appends bytes [off, off + len) of the stored slice `slice` (an index into
  // layout().slices(shard)) to out. The range lies inside the slice.
  virtual ptc::Status read_slice(const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
                                 ReadBuffer& out) const = 0;
};

struct StepEntry {
  std::string job, step;
  std::shared_ptr<const StepContent> content;
};

// One immutable version of a dataset (ptc/dataset.h): its spec, its position, and the
// bytes of its records. A record is what a rank view holds per sample: for JSONL the line
// with its newline (one is supplied when the file's last line lacks it), for Megatron the
// sequence's elements.
class DatasetContent {
 public:
  virtual ~DatasetContent() = default;
  virtual const ptc::DatasetSpec& spec() const = 0;
  virtual const ptc::DatasetPosition& position() const = 0;
  // Megatron datasets: the MMIDIDX dtype code of every sequence.
  virtual int dtype_code() const = 0;
  virtual uint64_t version() const = 0;
  virtual int64_t mtime() const = 0;
  // The sample order of the current epoch (computed once per version).
  virtual const std::vector<uint32_t>& order() const = 0;
  virtual uint64_t record_bytes(uint32_t sample) const = 0;

  struct Piece {
    uint32_t sample = 0;
    uint64_t off = 0, len = 0;  // inside the record
  };
  // Appends the bytes of each piece, in order.
  virtual ptc::Status read_records(const std::vector<Piece>& pieces, ReadBuffer& out) const = 0;
};

struct DatasetEntry {
  std::string job, name;
  std::shared_ptr<const DatasetContent> content;
};

// Everything the mount shows.
struct Contents {
  std::vector<StepEntry> steps;
  std::vector<DatasetEntry> datasets;
};

}  // namespace ptcfs::fs
