// check_round (client/gpu/p2p_ops.h): what a round of sends and receives must satisfy before
// NCCL sees it, each refusal with the words it gives.
#include <catch2/catch.hpp>

#include <vector>

#include "client/gpu/p2p_ops.h"

using ptcfs::gpu::check_round;
using ptcfs::gpu::P2POp;

namespace {

char buf[64];

P2POp send(int peer, uint64_t bytes) { return {peer, true, buf, bytes}; }
P2POp recv(int peer, uint64_t bytes) { return {peer, false, buf, bytes}; }

std::string refusal(const std::vector<P2POp>& ops, int rank, int nranks) {
  auto s = check_round(ops.data(), ops.size(), rank, nranks);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.code() == ptcfs::Code::kInvalidArgument);
  return s.message();
}

}  // namespace

TEST_CASE("a round between ranks, and one of a rank with itself paired in order, pass") {
  CHECK(check_round(nullptr, 0, 0, 1).is_ok());
  std::vector<P2POp> ops{send(1, 8), recv(2, 16), send(2, 4), recv(1, 0)};
  CHECK(check_round(ops.data(), ops.size(), 0, 3).is_ok());
  // One GPU playing every rank: its own sends and receives pair up in order.
  std::vector<P2POp> self{send(0, 8), send(0, 3), recv(0, 8), recv(0, 3)};
  CHECK(check_round(self.data(), self.size(), 0, 1).is_ok());
  // A zero-byte operation needs no buffer.
  std::vector<P2POp> empty{{1, true, nullptr, 0}};
  CHECK(check_round(empty.data(), 1, 0, 2).is_ok());
}

TEST_CASE("a bad rank, peer or buffer is refused naming the operation") {
  CHECK(refusal({}, 2, 2) == "rank 2 is outside a communicator of 2");
  CHECK(refusal({send(1, 8), recv(3, 8)}, 0, 3) ==
        "operation 1 (receive from 3, 8 bytes): the peer is outside ranks 0-2");
  CHECK(refusal({send(-1, 8)}, 0, 3) == "operation 0 (send to -1, 8 bytes): the peer is outside ranks 0-2");
  CHECK(refusal({{1, true, nullptr, 5}}, 0, 2) == "operation 0 (send to 1, 5 bytes): no buffer");
  auto s = check_round(nullptr, 2, 0, 2);
  CHECK(s.message() == "a round of 2 operations without their list");
}

TEST_CASE("sends to itself that its receives do not match would hang, and are refused") {
  CHECK(refusal({send(0, 8), send(0, 8), recv(0, 8)}, 0, 2) ==
        "rank 0 sends itself 2 messages in this round but receives 1 from itself: they must pair up");
  CHECK(refusal({send(1, 8), send(1, 4), recv(1, 4), recv(1, 8)}, 1, 2) ==
        "rank 1's message 0 to itself has 8 bytes but the receive it pairs with 4");
  // Messages to other ranks are not paired here (their peers check their own side).
  std::vector<P2POp> ops{send(1, 8), send(1, 8)};
  CHECK(check_round(ops.data(), ops.size(), 0, 2).is_ok());
}
