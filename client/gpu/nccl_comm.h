// A communicator over NCCL for live resharding between GPUs (docs/ARCHITECTURE.md "Live
// resharding"): rounds of grouped sends and receives of device memory (p2p_ops.h). NCCL is loaded
// when first needed (dlopen of $PTCFS_NCCL_LIBRARY, else libnccl.so.2, which a process that has
// imported torch for CUDA already holds), so libptcfs_client loads and works without it. Built
// from nccl_comm.cc when CMake finds CUDA and nccl.h, else from no_nccl.cc, whose calls say so.
//
// Thread-safety: a communicator runs one round at a time (a lock); open and close are not
// concurrent with its rounds. Errors: kUnavailable (no NCCL, no driver, no GPU, a failed
// bootstrap), kInvalidArgument (a bad rank, device or round), kDeadlineExceeded (a round not done
// in time) and kIo (a round NCCL reports failed, or CUDA failing mid-round); the first two of a
// round abort the communicator, and every later round is kFailedPrecondition: open a new one.
// Any failure once a round's operations were posted aborts it too. Not covered by a timeout: open
// waits for every rank to join, and NCCL connects two ranks the first time they exchange, inside
// the round's posting (ncclGroupEnd), where a peer that never comes can hold it; the round's
// timeout counts from the end of posting (a blocking communicator; docs/PYTHON.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "ptc/base/status.h"
#include "client/gpu/p2p_ops.h"

namespace ptcfs::gpu {

constexpr size_t kNcclIdBytes = 128;  // NCCL's ncclUniqueId
using NcclId = std::array<unsigned char, kNcclIdBytes>;

// NCCL's version code (e.g. 22809 for 2.28.9) once it loads, else kUnavailable saying why.
Result<int> nccl_version();

// A fresh unique id: one rank makes it and every rank of the communicator opens with it.
Result<NcclId> nccl_unique_id();

class NcclComm {
 public:
  // Joins communicator `id` as `rank` of `nranks` on GPU `device`; returns when every rank has
  // joined. The calling thread's selected GPU is the same afterwards.
  static Result<std::unique_ptr<NcclComm>> open(int rank, int nranks, const NcclId& id, int device);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }

  // Posts the round's operations as one group on `stream` (a cudaStream_t; nullptr: the default
  // stream) and returns when all are done; 0 timeout_ms: wait as long as it takes.
  Status exchange(const P2POp* ops, size_t n, void* stream, uint64_t timeout_ms);

 private:
  struct Impl;
  NcclComm(int rank, int nranks, int device, std::unique_ptr<Impl> impl);
  int rank_, nranks_, device_;
  std::unique_ptr<Impl> impl_;
  std::mutex mu_;
};

}  // namespace ptcfs::gpu
