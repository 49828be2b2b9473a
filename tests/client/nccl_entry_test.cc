// The NCCL entries of libptcfs_client (client/ptcfs_client.h) where there is no GPU (the CPU
// machines that run this; tests/gpu runs a communicator on a GPU): each call fails with a clear
// "code: words" and returns nothing to free. With NCCL in the build, NCCL itself loads (its
// version, a unique id); without it, every call says the build has none.
#include <catch2/catch.hpp>

#include <array>
#include <string>

#include "client/ptcfs_client.h"

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("without a GPU the NCCL entries refuse clearly") {
  char err[1024] = "";
  if (ptcfs_gpu_available(err, sizeof err) == 0) {
    WARN("this machine has a GPU: tests/gpu covers the communicator there");
    return;
  }
  std::array<unsigned char, PTCFS_NCCL_ID_BYTES> id{};
  const int version = ptcfs_nccl_version(err, sizeof err);
  if (version < 0) {  // a build without NCCL (or none installed): every entry says so
    INFO(err);
    CHECK(starts_with(err, "unavailable: "));
    CHECK(ptcfs_nccl_unique_id(id.data(), err, sizeof err) == -1);
    CHECK(starts_with(err, "unavailable: "));
  } else {
    CHECK(version >= 21300);
    std::array<unsigned char, PTCFS_NCCL_ID_BYTES> other{};
    if (ptcfs_nccl_unique_id(id.data(), err, sizeof err) == 0) {
      REQUIRE(ptcfs_nccl_unique_id(other.data(), err, sizeof err) == 0);
      CHECK(id != other);
    } else {  // NCCL's bootstrap found no network interface to listen on (a bare container)
      INFO(err);
      CHECK(starts_with(err, "unavailable: making an NCCL unique id: "));
    }
    CHECK(ptcfs_nccl_open(1, 1, id.data(), 0, err, sizeof err) == nullptr);
    CHECK(std::string(err) == "invalid_argument: rank 1 of 1: a rank is one of 0 to nranks - 1");
  }
  CHECK(ptcfs_nccl_open(0, 1, id.data(), 0, err, sizeof err) == nullptr);
  INFO(err);
  CHECK(starts_with(err, "unavailable: "));
  CHECK(ptcfs_nccl_open(0, 1, nullptr, 0, err, sizeof err) == nullptr);
  CHECK(std::string(err) == "invalid_argument: no unique id");
  ptcfs_p2p_op op{0, 1, nullptr, 0};
  CHECK(ptcfs_nccl_exchange(nullptr, &op, 1, nullptr, 0, err, sizeof err) == -1);
  CHECK(std::string(err) == "invalid_argument: no communicator");
  CHECK(ptcfs_nccl_exchange(nullptr, nullptr, 2, nullptr, 0, err, sizeof err) == -1);
  CHECK(std::string(err) == "invalid_argument: a round of 2 operations without their list");
  ptcfs_nccl_close(nullptr);  // nothing to close
}
