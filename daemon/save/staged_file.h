// A file staged in a pending step as it is written, before a conversion makes the step's tensors
// of it: a stock PyTorch DCP save's files (docs/FORMATS.md "Stock dcp.save into the mount"), kept
// until the save's .metadata lands,
//
//   <name>.distcp    a rank's data file (torch's FileSystemWriter names it __<rank>_<i>.distcp):
//                    written by one writer at a time, straight into a blob of its own
//   .metadata.tmp    the checkpoint's metadata, kept in memory (at most 64 MiB); renamed to
//                    .metadata, it converts the save into the step's tensors (dcp_save.h)
//
// torch writes each file front to back, syncs and closes it before the coordinator writes the
// metadata; a file still open for writing when the metadata lands fails the conversion. The files
// of a stock Hugging Face save_pretrained are staged the same way (daemon/save/hf_save.h): its
// JSON files in memory, its safetensors files (sized first with ftruncate) in blobs.
//
// Thread-safety: every method may be called concurrently; one mutex per file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "daemon/save/byte_ranges.h"
#include "daemon/store/blob_store.h"
#include "fs/content.h"

namespace ptcfs {

// The files of a stock DCP save: its metadata, as written and as renamed once complete.
inline constexpr const char* kDcpMetadataTmp = ".metadata.tmp";
inline constexpr const char* kDcpMetadata = ".metadata";

class StagedFile final : public fs::WriteFile {
 public:
  // `blob`: where a data file's bytes go; null for the metadata (kept in memory).
  StagedFile(std::string where, std::shared_ptr<BlobWriter> blob) : where_(std::move(where)), blob_(std::move(blob)) {}

  uint64_t size() const override;
  Result<uint64_t> open_writer() override;
  Status write(uint64_t writer, uint64_t off, const void* data, size_t len) override;
  Status truncate(uint64_t writer, uint64_t size) override;
  Status flush(uint64_t writer) override;
  void release(uint64_t writer) override;

  // Ends writing (every later write fails): the file must be closed and written without a
  // hole. Its size.
  Result<uint64_t> seal();
  // Reads [off, off + len) of a sealed file.
  Result<std::string> read(uint64_t off, uint64_t len) const;
  // The file was unlinked or its step went: writes fail, and its blob goes with the last handle.
  void kill();
  // The metadata's bytes (a file kept in memory).
  std::string text() const;
  // Whether no writer has it open (or its one writer closed it and wrote nothing since).
  bool closed() const;
  // Called (outside this file's lock) when its writer closes it; what it returns is the close's
  // status. Set once, before the file is shared.
  void on_close(std::function<Status()> f) { on_close_ = std::move(f); }

 private:
  const std::string where_;
  mutable std::mutex mu_;
  std::shared_ptr<BlobWriter> blob_;
  std::string text_;
  ByteRanges written_;
  uint64_t end_ = 0;
  uint64_t owner_ = 0;  // the one open handle (0: none)
  uint64_t last_ = 0;   // ids given out: 1, 2, ...
  bool closed_ = true;  // the owner closed it and wrote nothing since
  bool sealed_ = false;
  bool dead_ = false;
  std::function<Status()> on_close_;
};

}  // namespace ptcfs
