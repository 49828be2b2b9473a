// Carries out an upload plan (upload_plan.h) through a device: a ring of staging slots, each a
// pinned host buffer. The host copies chunk i into a free slot (several threads: the page cache
// is read at memory speed) while the device still copies chunk i - 1 up and gathers it, so host
// reads and device copies overlap; no byte goes through a second pageable buffer.
//
// Thread-safety: a Device is used by one upload at a time. Errors: what the device reports
// (kUnavailable when there is no usable GPU), with the chunk that failed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ptc/base/status.h"
#include "client/gpu/upload_plan.h"

namespace ptcfs::gpu {

// Where the bytes go: CUDA (cuda_device.cu) or the host double of the CPU tests.
class Device {
 public:
  virtual ~Device() = default;
  virtual size_t slots() const = 0;
  virtual uint64_t slot_bytes() const = 0;
  // Slot i's staging buffer (slot_bytes() bytes). Valid for writing after wait(i).
  virtual std::byte* staging(size_t i) = 0;
  // Returns when slot i's last copy no longer reads its buffer.
  [[nodiscard]] virtual Status wait(size_t i) = 0;
  // Slot i's staging holds chunk `c`'s bytes (`host`): copy them to `dst` (directly, or through
  // slot i's scratch, gathered by c.segments). May return before the copy is done (wait(i) and
  // finish() wait for it).
  [[nodiscard]] virtual Status copy(size_t i, const Chunk& c, const std::byte* host, std::byte* dst) = 0;
  [[nodiscard]] virtual Status zero(std::byte* dst, uint64_t len) = 0;
  // Returns when every copy is done.
  [[nodiscard]] virtual Status finish() = 0;
};

// Copies with a few threads (this one included), each a contiguous share. One copy at a time.
// (Populating the source mapping's page tables first with MADV_POPULATE_READ, and registering
// the mapped blobs with the driver instead of staging, were measured worse on an H100 host:
// docs/BENCHMARKS.md "GPU".)
class ParallelCopy {
 public:
  explicit ParallelCopy(unsigned threads);
  ~ParallelCopy();
  ParallelCopy(const ParallelCopy&) = delete;
  ParallelCopy& operator=(const ParallelCopy&) = delete;
  void copy(std::byte* dst, const std::byte* src, uint64_t len);
  // The same split, each share read by pread from `fd` at `off` on (short reads and EINTR
  // retried): kIo naming the offset, kCorrupt where the file ends first.
  [[nodiscard]] Status read(std::byte* dst, int fd, uint64_t off, uint64_t len);

 private:
  struct State;
  // Runs part(begin, end) over shares of [0, len) that cover it, on the threads.
  void split(uint64_t len, const std::function<void(uint64_t, uint64_t)>& part);
  std::unique_ptr<State> s_;
};

// How chunks are staged (PTCFS_GPU_STAGE, docs/PYTHON.md): pread from the mapped file's descriptor
// (kPread, the default: no page faults on a fresh mapping; ~15% faster on an H100 host, docs/
// BENCHMARKS.md "GPU") or memcpy from the mapping (kCopy).
enum class Stage { kCopy, kPread };
// PTCFS_GPU_STAGE: unset, empty or "pread": kPread; "copy": kCopy; else kInvalidArgument.
Result<Stage> stage_from_env();

// A mapped source's file, for staging by pread: mapped whole at [base, base + len), open as fd.
struct SourceFile {
  const std::byte* base = nullptr;
  uint64_t len = 0;
  int fd = -1;
};

// Where an upload's time went (nanoseconds of the calling thread).
struct UploadTimes {
  uint64_t stage_ns = 0;  // copying host bytes into staging slots
  uint64_t wait_ns = 0;   // waiting for a slot, and for the last copies
  uint64_t total_ns = 0;
};

// Uploads `plan` into `dst` (device memory of `device`); returns when every byte is there.
// Chunks are staged by memcpy from their src, or, where `pread_from` has the files (by source),
// by pread of the same bytes from chunk.source's file; an error there names the chunk.
[[nodiscard]] Status run_upload(const UploadPlan& plan, std::byte* dst, Device& device, ParallelCopy& copier,
                                UploadTimes* times = nullptr, const std::vector<SourceFile>& pread_from = {});

}  // namespace ptcfs::gpu
