// cuda_device.h in a build without CUDA.
#include "client/gpu/cuda_device.h"

namespace ptcfs::gpu {

Status gpu_available() {
  return unavailable("this libptcfs_client was built without CUDA (CMake found no CUDA toolkit)");
}

Result<DeviceLease> lease_device(void*, void*) { return gpu_available(); }

}  // namespace ptcfs::gpu
