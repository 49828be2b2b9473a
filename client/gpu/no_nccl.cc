// nccl_comm.h in a build without CUDA or without NCCL's header.
#include "client/gpu/nccl_comm.h"

namespace ptcfs::gpu {

namespace {

Status absent() {
  return unavailable("this libptcfs_client was built without NCCL (CMake found no CUDA toolkit with nccl.h)");
}

}  // namespace

struct NcclComm::Impl {};

Result<int> nccl_version() { return absent(); }
Result<NcclId> nccl_unique_id() { return absent(); }
Result<std::unique_ptr<NcclComm>> NcclComm::open(int, int, const NcclId&, int) { return absent(); }
NcclComm::NcclComm(int rank, int nranks, int device, std::unique_ptr<Impl> impl)
    : rank_(rank), nranks_(nranks), device_(device), impl_(std::move(impl)) {}
NcclComm::~NcclComm() = default;
Status NcclComm::exchange(const P2POp*, size_t, void*, uint64_t) { return absent(); }

}  // namespace ptcfs::gpu
