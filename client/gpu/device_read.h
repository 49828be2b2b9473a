// Reading a byte range of a direct file into GPU memory (docs/ARCHITECTURE.md "Path of a GPU
// load"): the range's spans are planned (upload_plan.h) and uploaded through pinned staging
// (upload.h), strided pieces gathered on the device.
#pragma once

#include <cstdint>

#include "ptc/base/status.h"
#include "client/direct_client.h"
#include "client/gpu/upload_plan.h"

namespace ptcfs::gpu {

struct UploadStats {
  uint64_t staged_bytes = 0, zero_bytes = 0;
  uint64_t chunks = 0, direct_chunks = 0, gathered_chunks = 0;
  uint64_t plan_ns = 0, stage_ns = 0, wait_ns = 0, total_ns = 0;
};

// The file's spans as upload pieces.
std::vector<Piece> pieces_of(const client::DirectFile& f);

// Copies bytes [off, off + len) of `f` to `dst` (device memory) ordered on `stream` (a
// cudaStream_t or nullptr); returns when they are there. kOutOfRange past the end of the file,
// kUnavailable without a usable GPU, kInvalidArgument when dst is not device memory or
// PTCFS_GPU_STAGE is neither copy nor pread; staging by pread: kIo (a failed read), kCorrupt (a
// blob shorter than its mapping), kInternal (a chunk outside its source).
Status read_to_device(const client::DirectFile& f, uint64_t off, uint64_t len, void* dst, void* stream,
                      UploadStats* stats = nullptr);

}  // namespace ptcfs::gpu
