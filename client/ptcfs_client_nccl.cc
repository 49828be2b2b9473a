// The NCCL part of libptcfs_client's C interface (client/ptcfs_client.h) over NcclComm.
#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "client/c_error.h"
#include "client/gpu/nccl_comm.h"
#include "client/ptcfs_client.h"

struct ptcfs_nccl {
  std::unique_ptr<ptcfs::gpu::NcclComm> c;
};

using ptcfs::client::set_error;

extern "C" {

int ptcfs_nccl_version(char* err, size_t errlen) {
  try {
    auto v = ptcfs::gpu::nccl_version();
    if (v) return *v;
    set_error(err, errlen, v.status().to_string());
  } catch (const std::exception& e) {  // nothing may cross the C boundary
    set_error(err, errlen, std::string("internal: ") + e.what());
  }
  return -1;
}

int ptcfs_nccl_unique_id(unsigned char* id, char* err, size_t errlen) {
  try {
    if (!id) {
      set_error(err, errlen, "invalid_argument: no buffer for the id");
      return -1;
    }
    auto made = ptcfs::gpu::nccl_unique_id();
    if (!made) {
      set_error(err, errlen, made.status().to_string());
      return -1;
    }
    std::copy(made->begin(), made->end(), id);
    return 0;
  } catch (const std::exception& e) {
    set_error(err, errlen, std::string("internal: ") + e.what());
    return -1;
  }
}

ptcfs_nccl* ptcfs_nccl_open(int rank, int nranks, const unsigned char* id, int device, char* err, size_t errlen) {
  try {
    if (!id) {
      set_error(err, errlen, "invalid_argument: no unique id");
      return nullptr;
    }
    ptcfs::gpu::NcclId nid;
    std::copy(id, id + nid.size(), nid.begin());
    auto c = ptcfs::gpu::NcclComm::open(rank, nranks, nid, device);
    if (!c) {
      set_error(err, errlen, c.status().to_string());
      return nullptr;
    }
    return new ptcfs_nccl{std::move(c).value()};
  } catch (const std::exception& e) {
    set_error(err, errlen, std::string("internal: ") + e.what());
    return nullptr;
  }
}

int ptcfs_nccl_exchange(ptcfs_nccl* c, const ptcfs_p2p_op* ops, size_t n, void* stream, uint64_t timeout_ms, char* err,
                        size_t errlen) {
  try {
    if (n > 0 && !ops) {
      set_error(err, errlen, "invalid_argument: a round of " + std::to_string(n) + " operations without their list");
      return -1;
    }
    if (!c) {
      set_error(err, errlen, "invalid_argument: no communicator");
      return -1;
    }
    std::vector<ptcfs::gpu::P2POp> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = {ops[i].peer, ops[i].send != 0, ops[i].data, ops[i].bytes};
    auto s = c->c->exchange(v.data(), n, stream, timeout_ms);
    if (s) return 0;
    set_error(err, errlen, s.to_string());
    return -1;
  } catch (const std::exception& e) {
    set_error(err, errlen, std::string("internal: ") + e.what());
    return -1;
  }
}

void ptcfs_nccl_close(ptcfs_nccl* c) { delete c; }

}  // extern "C"
