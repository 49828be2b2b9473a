#include "client/gpu/device_read.h"

#include <chrono>
#include <string>
#include <vector>

#include "client/gpu/cuda_device.h"
#include "client/gpu/upload.h"

namespace ptcfs::gpu {

std::vector<Piece> pieces_of(const client::DirectFile& f) {
  std::vector<Piece> out;
  out.reserve(f.spans().size());
  for (const auto& s : f.spans()) out.push_back(Piece{s.data, s.len, s.source});
  return out;
}

Status read_to_device(const client::DirectFile& f, uint64_t off, uint64_t len, void* dst, void* stream,
                      UploadStats* stats) {
  if (off > f.size() || len > f.size() - off)
    return error(Code::kOutOfRange, "read of [" + std::to_string(off) + ", +" + std::to_string(len) +
                                        ") past the end of a " + std::to_string(f.size()) + "-byte file");
  if (len == 0) return Status::ok();
  const auto start = std::chrono::steady_clock::now();
  PTC_ASSIGN_OR_RETURN(DeviceLease lease, lease_device(dst, stream));
  PTC_ASSIGN_OR_RETURN(const Stage stage, stage_from_env());
  std::vector<SourceFile> files;  // empty: staged by memcpy from the mappings
  if (stage == Stage::kPread)
    for (size_t i = 0; i < f.mappings().size(); ++i)
      files.push_back(SourceFile{f.mappings()[i].data, f.mappings()[i].len, f.fd(i)});
  UploadOptions options;
  options.chunk_bytes = lease.device->slot_bytes();
  const UploadPlan plan = plan_upload(cut_range(pieces_of(f), off, len), options);
  const auto planned = std::chrono::steady_clock::now();
  UploadTimes times;
  PTC_RETURN_IF_ERROR(run_upload(plan, static_cast<std::byte*>(dst), *lease.device, *lease.copier, &times, files));
  if (stats) {
    stats->plan_ns = static_cast<uint64_t>(std::chrono::nanoseconds(planned - start).count());
    stats->stage_ns = times.stage_ns;
    stats->wait_ns = times.wait_ns;
    stats->total_ns = stats->plan_ns + times.total_ns;
    stats->staged_bytes = plan.staged_bytes;
    stats->zero_bytes = plan.zero_bytes;
    stats->chunks = plan.chunks.size();
    stats->direct_chunks = plan.direct_chunks;
    stats->gathered_chunks = plan.gathered_chunks;
  }
  return Status::ok();
}

}  // namespace ptcfs::gpu
