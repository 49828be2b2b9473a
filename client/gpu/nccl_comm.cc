// nccl_comm.h with CUDA and NCCL's header: NCCL's functions are looked up in the library loaded at
// run time, with the header's types.
#include "client/gpu/nccl_comm.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "client/gpu/cuda_status.h"

namespace ptcfs::gpu {

namespace {

struct Api {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) init_rank = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclCommGetAsyncError) async_error = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetLastError) last_error = nullptr;
  int version = 0;
};

template <class F>
bool find(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

Status load(Api& a) {
  const char* env = std::getenv("PTCFS_NCCL_LIBRARY");
  const std::string path = env && *env ? env : "libnccl.so.2";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process's life
  if (!lib) {
    const char* why = dlerror();
    return unavailable("loading NCCL (" + path + "): " + (why ? why : "dlopen failed") +
                       " (set PTCFS_NCCL_LIBRARY to the path of libnccl.so.2)");
  }
  const bool all = find(lib, "ncclGetVersion", a.get_version) && find(lib, "ncclGetUniqueId", a.get_unique_id) &&
                   find(lib, "ncclCommInitRank", a.init_rank) && find(lib, "ncclCommDestroy", a.destroy) &&
                   find(lib, "ncclCommAbort", a.abort) && find(lib, "ncclCommGetAsyncError", a.async_error) &&
                   find(lib, "ncclGroupStart", a.group_start) && find(lib, "ncclGroupEnd", a.group_end) &&
                   find(lib, "ncclSend", a.send) && find(lib, "ncclRecv", a.recv) &&
                   find(lib, "ncclGetErrorString", a.error_string) && find(lib, "ncclGetLastError", a.last_error);
  if (!all) return unavailable(path + " lacks a function this library needs (NCCL 2.13 or later is needed)");
  if (a.get_version(&a.version) != ncclSuccess) return unavailable(path + " did not say its version");
  return Status::ok();
}

// NCCL, loaded once per process.
Result<const Api*> api() {
  static const Api* loaded = nullptr;
  static Status failed = Status::ok();
  static std::once_flag once;
  std::call_once(once, [] {
    static Api a;
    failed = load(a);
    if (failed) loaded = &a;
  });
  if (!loaded) return failed;
  return loaded;
}

Status nccl_status(const Api& a, ncclResult_t r, ncclComm_t comm, const std::string& what) {
  if (r == ncclSuccess) return Status::ok();
  std::string m = what + ": " + a.error_string(r);
  if (const char* last = a.last_error(comm); last && *last) m += std::string(" (") + last + ")";
  return error(r == ncclInvalidArgument || r == ncclInvalidUsage ? Code::kInvalidArgument : Code::kIo, m);
}

// Selects a GPU for the calling thread and gives the one it had back when it goes.
class GpuSelection {
 public:
  ~GpuSelection() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  Status select(int device) {
    int n = 0;
    PTCFS_CUDA_TRY(cudaGetDeviceCount(&n), "looking for a GPU");
    if (device < 0 || device >= n)
      return invalid("GPU " + std::to_string(device) + " does not exist (this process sees " + std::to_string(n) + ")");
    PTCFS_CUDA_TRY(cudaGetDevice(&previous_), "asking which GPU this thread uses");
    return cuda_status(cudaSetDevice(device), "selecting GPU " + std::to_string(device));
  }

 private:
  int previous_ = -1;
};

uint64_t ms_since(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count());
}

}  // namespace

struct NcclComm::Impl {
  const Api* api = nullptr;
  ncclComm_t comm = nullptr;
  cudaEvent_t done = nullptr;
  std::string aborted;  // why, once a round was abandoned
};

Result<int> nccl_version() {
  PTC_ASSIGN_OR_RETURN(const Api* a, api());
  return a->version;
}

Result<NcclId> nccl_unique_id() {
  PTC_ASSIGN_OR_RETURN(const Api* a, api());
  ncclUniqueId id;
  static_assert(sizeof(id) == kNcclIdBytes);
  const ncclResult_t r = a->get_unique_id(&id);
  if (r != ncclSuccess) {
    const char* last = a->last_error(nullptr);
    return unavailable(std::string("making an NCCL unique id: ") + a->error_string(r) +
                       (last && *last ? std::string(" (") + last + ")" : std::string()));
  }
  NcclId out;
  std::memcpy(out.data(), &id, kNcclIdBytes);
  return out;
}

NcclComm::NcclComm(int rank, int nranks, int device, std::unique_ptr<Impl> impl)
    : rank_(rank), nranks_(nranks), device_(device), impl_(std::move(impl)) {}

Result<std::unique_ptr<NcclComm>> NcclComm::open(int rank, int nranks, const NcclId& id, int device) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return invalid("rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                   ": a rank is one of 0 to nranks - 1");
  PTC_ASSIGN_OR_RETURN(const Api* a, api());
  GpuSelection gpu;
  PTC_RETURN_IF_ERROR(gpu.select(device));
  auto impl = std::make_unique<Impl>();
  impl->api = a;
  PTCFS_CUDA_TRY(cudaEventCreateWithFlags(&impl->done, cudaEventDisableTiming), "creating an event");
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), kNcclIdBytes);
  const ncclResult_t r = a->init_rank(&impl->comm, nranks, nid, rank);
  if (r != ncclSuccess) {
    cudaEventDestroy(impl->done);
    auto s = nccl_status(*a, r, nullptr,
                         "joining an NCCL communicator as rank " + std::to_string(rank) + " of " +
                             std::to_string(nranks) + " on GPU " + std::to_string(device));
    return s.code() == Code::kInvalidArgument ? s : unavailable(s.message());
  }
  return std::unique_ptr<NcclComm>(new NcclComm(rank, nranks, device, std::move(impl)));
}

NcclComm::~NcclComm() {
  if (!impl_) return;
  GpuSelection gpu;
  (void)gpu.select(device_);
  if (impl_->comm && impl_->aborted.empty()) impl_->api->destroy(impl_->comm);
  if (impl_->done) cudaEventDestroy(impl_->done);
}

Status NcclComm::exchange(const P2POp* ops, size_t n, void* stream, uint64_t timeout_ms) {
  std::lock_guard lock(mu_);
  Impl& im = *impl_;
  if (!im.aborted.empty()) return error(Code::kFailedPrecondition, im.aborted);
  PTC_RETURN_IF_ERROR(check_round(ops, n, rank_, nranks_));
  for (size_t i = 0; i < n; ++i) {
    if (ops[i].bytes == 0) continue;
    cudaPointerAttributes attr{};
    PTCFS_CUDA_TRY(cudaPointerGetAttributes(&attr, ops[i].data), "asking where a buffer lies");
    if ((attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) || attr.device != device_)
      return invalid("operation " + std::to_string(i) + ": its buffer is not memory of GPU " + std::to_string(device_) +
                     ", this communicator's");
  }
  GpuSelection gpu;
  PTC_RETURN_IF_ERROR(gpu.select(device_));
  const Api& a = *im.api;
  const auto cs = static_cast<cudaStream_t>(stream);
  Status posted = nccl_status(a, a.group_start(), im.comm, "starting a group");
  if (!posted) return posted;
  for (size_t i = 0; i < n && posted; ++i) {
    const P2POp& op = ops[i];
    if (op.bytes == 0) continue;
    const ncclResult_t r = op.send ? a.send(op.data, op.bytes, ncclUint8, op.peer, im.comm, cs)
                                   : a.recv(op.data, op.bytes, ncclUint8, op.peer, im.comm, cs);
    posted = nccl_status(a, r, im.comm, "posting operation " + std::to_string(i));
  }
  const Status ended = nccl_status(a, a.group_end(), im.comm, "posting the round");
  // From here on operations may be in flight: any failure aborts the communicator, so that no
  // kernel of it still reads or writes the caller's buffers and no peer waits on this rank.
  const auto give_up = [&](const Status& why) {
    a.abort(im.comm);
    im.aborted = why.message() + "; the communicator was aborted: open a new one";
    return error(why.code(), im.aborted);
  };
  if (!posted) return give_up(posted);
  if (!ended) return give_up(ended);
  if (auto r = cuda_status(cudaEventRecord(im.done, cs), "recording the round's end"); !r) return give_up(r);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaEventQuery(im.done);
    if (e == cudaSuccess) return Status::ok();
    if (e != cudaErrorNotReady) return give_up(cuda_status(e, "waiting for the round"));
    ncclResult_t async = ncclSuccess;
    if (auto r = nccl_status(a, a.async_error(im.comm, &async), im.comm, "asking NCCL how the round goes"); !r)
      return give_up(r);
    if (async != ncclSuccess && async != ncclInProgress)
      return give_up(nccl_status(a, async, im.comm, "the round failed"));
    if (timeout_ms && ms_since(start) > timeout_ms)
      return give_up(
          error(Code::kDeadlineExceeded, "the round of " + std::to_string(n) + " operations was not done within " +
                                             std::to_string(timeout_ms) + " ms (a peer that never posted its part?)"));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace ptcfs::gpu
