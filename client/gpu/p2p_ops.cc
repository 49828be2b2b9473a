#include "client/gpu/p2p_ops.h"

#include <string>
#include <vector>

namespace ptcfs::gpu {

namespace {

std::string op_name(const P2POp& op, size_t i) {
  return "operation " + std::to_string(i) + " (" + (op.send ? "send to " : "receive from ") + std::to_string(op.peer) +
         ", " + std::to_string(op.bytes) + " bytes)";
}

}  // namespace

Status check_round(const P2POp* ops, size_t n, int rank, int nranks) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return invalid("rank " + std::to_string(rank) + " is outside a communicator of " + std::to_string(nranks));
  if (n > 0 && !ops) return invalid("a round of " + std::to_string(n) + " operations without their list");
  std::vector<uint64_t> to_self, from_self;
  for (size_t i = 0; i < n; ++i) {
    const P2POp& op = ops[i];
    if (op.peer < 0 || op.peer >= nranks)
      return invalid(op_name(op, i) + ": the peer is outside ranks 0-" + std::to_string(nranks - 1));
    if (op.bytes > 0 && !op.data) return invalid(op_name(op, i) + ": no buffer");
    if (op.peer == rank) (op.send ? to_self : from_self).push_back(op.bytes);
  }
  if (to_self.size() != from_self.size())
    return invalid("rank " + std::to_string(rank) + " sends itself " + std::to_string(to_self.size()) +
                   " messages in this round but receives " + std::to_string(from_self.size()) +
                   " from itself: they must pair up");
  for (size_t k = 0; k < to_self.size(); ++k)
    if (to_self[k] != from_self[k])
      return invalid("rank " + std::to_string(rank) + "'s message " + std::to_string(k) + " to itself has " +
                     std::to_string(to_self[k]) + " bytes but the receive it pairs with " +
                     std::to_string(from_self[k]));
  return Status::ok();
}

}  // namespace ptcfs::gpu
