// The copy of one gather segment, shared by the CUDA kernel (cuda_device.cu) and the host double
// the CPU tests use, so the index math the GPU runs is the math the CPU tests check. Plain C++
// with no standard library: nvcc compiles it for the device.
#pragma once

#include <stdint.h>

#ifdef __CUDACC__
#define PTCFS_HD __host__ __device__
#else
#define PTCFS_HD
#endif

namespace ptcfs::gpu {

// `len` bytes at offset `src` of a chunk's staged bytes go to offset `dst` of the destination.
struct Segment {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t len = 0;
};

struct alignas(16) Block16 {
  uint64_t lo, hi;
};

// Worker `t` of `n` copies its share of segment `s` (bytes t, t + n, ... or, when both ends are
// 16-byte aligned, 16-byte blocks t, t + n, ...). Every byte is copied by exactly one worker.
PTCFS_HD inline void copy_segment_share(const Segment& s, const unsigned char* src, unsigned char* dst, uint64_t t,
                                        uint64_t n) {
  const unsigned char* a = src + s.src;
  unsigned char* b = dst + s.dst;
  uint64_t head = 0;
  if (reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0) {
    const uint64_t blocks = s.len / 16;
    const Block16* from = reinterpret_cast<const Block16*>(a);
    Block16* to = reinterpret_cast<Block16*>(b);
    for (uint64_t i = t; i < blocks; i += n) to[i] = from[i];
    head = blocks * 16;
  }
  for (uint64_t i = head + t; i < s.len; i += n) b[i] = a[i];
}

}  // namespace ptcfs::gpu
