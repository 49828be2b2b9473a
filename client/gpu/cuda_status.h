// CUDA runtime results as Status, for the GPU sources (cuda_device.cu, nccl_comm.cc): no
// driver, no GPU and the like are kUnavailable; anything else is kIo, with CUDA's name and words.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "ptc/base/status.h"

namespace ptcfs::gpu {

inline Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::ok();
  const bool absent = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaErrorStubLibrary ||
                      e == cudaErrorInitializationError || e == cudaErrorSystemDriverMismatch;
  return error(absent ? Code::kUnavailable : Code::kIo,
               what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace ptcfs::gpu

#define PTCFS_CUDA_TRY(call, what) PTC_RETURN_IF_ERROR(::ptcfs::gpu::cuda_status((call), (what)))
