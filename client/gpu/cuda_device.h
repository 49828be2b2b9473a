// The CUDA device of an upload (upload.h), one per GPU per process, made on first use. Built
// from cuda_device.cu when CMake finds CUDA, else from no_cuda.cc, whose calls say the build
// has no GPU path (kUnavailable). Only client/gpu/ names CUDA (this, cuda_status.h and the
// NCCL communicator, nccl_comm.h).
//
// Thread-safety: a lease holds its device's lock, so uploads to one GPU run one at a time.
#pragma once

#include <memory>
#include <mutex>

#include "ptc/base/status.h"
#include "client/gpu/upload.h"

namespace ptcfs::gpu {

struct DeviceLease {
  // Gives the calling thread back the GPU it had selected before (last: after the lock).
  std::shared_ptr<void> restore;
  std::unique_lock<std::mutex> lock;
  Device* device = nullptr;
  ParallelCopy* copier = nullptr;
};

// The device that holds `dst` (a CUDA device pointer), its copies ordered on `stream` (a
// cudaStream_t; nullptr: the default stream). kInvalidArgument when dst is not device memory,
// kUnavailable when there is no CUDA in the build, no driver or no GPU.
Result<DeviceLease> lease_device(void* dst, void* stream);

// Whether this process can use a GPU: ok, or kUnavailable saying why not.
Status gpu_available();

}  // namespace ptcfs::gpu
