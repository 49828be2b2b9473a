// One round of point-to-point transfers between the ranks of a communicator (live resharding,
// docs/ARCHITECTURE.md "Live resharding"), and the checks made before any of it is posted. Pure:
// no CUDA, no NCCL, so the CPU tests cover it.
//
// A round's operations are posted as one group: NCCL pairs each rank's sends to a peer with that
// peer's receives from it in the order they were listed, so both ends must list them in the same
// order (the plan's). A rank may send to itself (one GPU playing every rank): then its own sends
// and receives pair up in order, which check_round verifies because an unmatched one would hang.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ptc/base/status.h"

namespace ptcfs::gpu {

struct P2POp {
  int peer = 0;
  bool send = false;
  void* data = nullptr;  // device memory; may be nullptr only when bytes == 0
  uint64_t bytes = 0;
};

// kInvalidArgument naming the first bad operation: a peer outside [0, nranks), a null buffer with
// bytes to move, or sends to `rank` itself that its own receives do not match one for one (same
// count, same sizes in the same order).
Status check_round(const P2POp* ops, size_t n, int rank, int nranks);

}  // namespace ptcfs::gpu
