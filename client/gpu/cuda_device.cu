// cuda_device.h with CUDA: pinned staging slots, device scratch, the gather kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "client/gpu/cuda_device.h"
#include "client/gpu/cuda_status.h"
#include "client/gpu/segment_copy.h"

namespace ptcfs::gpu {

namespace {

// One block per segment, its threads striding through it (segment_copy.h).
__global__ void gather_kernel(const unsigned char* src, unsigned char* dst, const Segment* segs, uint64_t n) {
  for (uint64_t s = blockIdx.x; s < n; s += gridDim.x) copy_segment_share(segs[s], src, dst, threadIdx.x, blockDim.x);
}

unsigned copy_threads() {
  if (const char* env = std::getenv("PTCFS_GPU_COPY_THREADS"); env && *env) return std::max(1, std::atoi(env));
  // Three quarters of the cores, at most 12: on a 16-core H100 host loads ran at 29-46 GB/s with 12
  // threads, 27-31 with 8, and 16 were no better than 12 (docs/BENCHMARKS.md "GPU").
  return std::clamp(std::thread::hardware_concurrency() * 3 / 4, 1u, 12u);
}

uint64_t env_or(const char* name, uint64_t fallback, uint64_t lo, uint64_t hi) {
  const char* env = std::getenv(name);
  if (!env || !*env) return fallback;
  return std::clamp<uint64_t>(std::strtoull(env, nullptr, 10), lo, hi);
}

class CudaDevice final : public Device {
 public:
  static Result<std::unique_ptr<CudaDevice>> create(int gpu) {
    std::unique_ptr<CudaDevice> d(new CudaDevice(gpu));
    // Tunables for measurement (docs/BENCHMARKS.md "GPU"): the slots and their size.
    d->slots_.resize(env_or("PTCFS_GPU_SLOTS", 4, 2, 64));
    d->slot_bytes_ = env_or("PTCFS_GPU_SLOT_MB", 8, 1, 256) << 20;
    for (Slot& s : d->slots_) {
      PTCFS_CUDA_TRY(cudaHostAlloc(&s.host, d->slot_bytes_, cudaHostAllocDefault), "allocating pinned staging");
      PTCFS_CUDA_TRY(cudaMalloc(&s.scratch, d->slot_bytes_), "allocating device scratch");
      PTCFS_CUDA_TRY(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "creating an event");
    }
    return Result<std::unique_ptr<CudaDevice>>(std::move(d));
  }

  ~CudaDevice() override {
    cudaSetDevice(gpu_);
    for (Slot& s : slots_) {
      if (s.done) {
        cudaEventSynchronize(s.done);
        cudaEventDestroy(s.done);
      }
      cudaFreeHost(s.host);
      cudaFree(s.scratch);
      cudaFreeHost(s.host_segs);
      cudaFree(s.dev_segs);
    }
  }

  void bind(cudaStream_t stream) { stream_ = stream; }

  size_t slots() const override { return slots_.size(); }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  std::byte* staging(size_t i) override { return static_cast<std::byte*>(slots_[i].host); }

  Status wait(size_t i) override { return cuda_status(cudaEventSynchronize(slots_[i].done), "waiting for a copy"); }

  Status copy(size_t i, const Chunk& c, const std::byte* host, std::byte* dst) override {
    Slot& s = slots_[i];
    if (c.direct()) {
      PTCFS_CUDA_TRY(cudaMemcpyAsync(dst + c.segments[0].dst, host, c.len, cudaMemcpyHostToDevice, stream_),
                     "copying to the device");
    } else {
      const size_t n = c.segments.size();
      if (n > s.seg_cap) {  // the slot is idle (waited for): grow its segment tables
        cudaFreeHost(s.host_segs);
        cudaFree(s.dev_segs);
        s.host_segs = nullptr, s.dev_segs = nullptr, s.seg_cap = 0;
        const size_t cap = std::max<size_t>(n, 4096);
        PTCFS_CUDA_TRY(cudaHostAlloc(&s.host_segs, cap * sizeof(Segment), cudaHostAllocDefault),
                       "allocating pinned segments");
        PTCFS_CUDA_TRY(cudaMalloc(&s.dev_segs, cap * sizeof(Segment)), "allocating device segments");
        s.seg_cap = cap;
      }
      std::copy(c.segments.begin(), c.segments.end(), s.host_segs);
      PTCFS_CUDA_TRY(cudaMemcpyAsync(s.scratch, host, c.len, cudaMemcpyHostToDevice, stream_), "copying to the device");
      PTCFS_CUDA_TRY(cudaMemcpyAsync(s.dev_segs, s.host_segs, n * sizeof(Segment), cudaMemcpyHostToDevice, stream_),
                     "copying segments to the device");
      const unsigned blocks = static_cast<unsigned>(std::min<size_t>(n, 8192));
      gather_kernel<<<blocks, 256, 0, stream_>>>(static_cast<const unsigned char*>(s.scratch),
                                                 reinterpret_cast<unsigned char*>(dst), s.dev_segs, n);
      PTCFS_CUDA_TRY(cudaGetLastError(), "starting the gather kernel");
    }
    return cuda_status(cudaEventRecord(s.done, stream_), "recording an event");
  }

  Status zero(std::byte* dst, uint64_t len) override {
    return cuda_status(cudaMemsetAsync(dst, 0, len, stream_), "zeroing device memory");
  }

  Status finish() override { return cuda_status(cudaStreamSynchronize(stream_), "finishing the copies"); }

  std::mutex mu;
  ParallelCopy copier{copy_threads()};

 private:
  struct Slot {
    void* host = nullptr;
    void* scratch = nullptr;
    Segment* host_segs = nullptr;
    Segment* dev_segs = nullptr;
    size_t seg_cap = 0;
    cudaEvent_t done = nullptr;
  };
  explicit CudaDevice(int gpu) : gpu_(gpu) {}
  int gpu_;
  cudaStream_t stream_ = nullptr;
  std::vector<Slot> slots_;
  uint64_t slot_bytes_ = 0;
};

std::mutex g_mu;  // guards g_devices
std::map<int, std::unique_ptr<CudaDevice>> g_devices;

}  // namespace

Status gpu_available() {
  int n = 0;
  PTCFS_CUDA_TRY(cudaGetDeviceCount(&n), "looking for a GPU");
  if (n == 0) return unavailable("looking for a GPU: the driver sees none");
  return Status::ok();
}

Result<DeviceLease> lease_device(void* dst, void* stream) {
  PTC_RETURN_IF_ERROR(gpu_available());
  cudaPointerAttributes attr{};
  PTCFS_CUDA_TRY(cudaPointerGetAttributes(&attr, dst), "asking where the destination lies");
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return invalid("the destination is not device memory (allocate it with cudaMalloc or torch on a cuda device)");
  int previous = 0;
  PTCFS_CUDA_TRY(cudaGetDevice(&previous), "asking which GPU this thread uses");
  PTCFS_CUDA_TRY(cudaSetDevice(attr.device), "selecting GPU " + std::to_string(attr.device));
  // The caller's selection (torch's current device, say) is given back when the lease ends.
  std::shared_ptr<void> restore(nullptr, [previous](void*) { cudaSetDevice(previous); });
  CudaDevice* device = nullptr;
  {
    std::lock_guard lock(g_mu);
    auto& slot = g_devices[attr.device];
    if (!slot) {
      auto made = CudaDevice::create(attr.device);
      if (!made) return made.status().with_context("preparing GPU " + std::to_string(attr.device));
      slot = std::move(made).value();
    }
    device = slot.get();
  }
  DeviceLease lease{std::move(restore), std::unique_lock<std::mutex>(device->mu), device, &device->copier};
  device->bind(static_cast<cudaStream_t>(stream));
  return Result<DeviceLease>(std::move(lease));
}

}  // namespace ptcfs::gpu
