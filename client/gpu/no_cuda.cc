// cuda_device.h in a build without CUDA.
#include "client/gpu/cuda_device.h"

namespace ptcfs::gpu {

ptc::Status gpu_available() {
  return ptc::unavailable("this libptcfs_client was built without CUDA (CMake found no CUDA toolkit)");
}

ptc::Result<DeviceLease> lease_device(void*, void*) { return gpu_available(); }

}  // namespace ptcfs::gpu
