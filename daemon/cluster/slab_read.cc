#include "daemon/cluster/slab_read.h"

#include "daemon/store/checksum.h"


#include <algorithm>

#include "ptc/base/json_util.h"
#include "ptc/plan.h"

namespace ptcfs {

using nlohmann::json;

namespace {

// A peer read's pieces, all memory: mapped blobs and zeros.
class SlabSink final : public ReadBufferSink {
 public:
  SlabSink(const std::string& tensor, fs::ReadBuffer& out) : ReadBufferSink(out), tensor_(tensor) {}
  ptc::Status blob(const std::shared_ptr<const BlobFile>& file, uint64_t off, uint64_t n) override {
    fs::ReadBuffer& buf = out(file);
    const std::byte* map = file->data();
    if (!map || off + n > file->mapped_size())
      return ptc::corrupt("blob " + std::to_string(file->id()) + " is shorter than the metadata of '" + tensor_ +
                          "' says");
    buf.add_mem(map + off, n);
    return ptc::Status::ok();
  }

 private:
  const std::string& tensor_;
};

ptc::Result<std::string> str(const json& req, const char* key) {
  if (!req.contains(key)) return ptc::invalid(std::string("peer.read lacks '") + key + "'");
  return ptc::get_string(req[key], std::string("peer.read '") + key + "'");
}

ptc::Result<int64_t> num(const json& req, const char* key) {
  if (!req.contains(key)) return ptc::invalid(std::string("peer.read lacks '") + key + "'");
  return ptc::get_int(req[key], std::string("peer.read '") + key + "'", 0);
}

}  // namespace

ptc::Result<transport::Reply> serve_slab_read(Store& store, const json& req, uint64_t max_bytes) {
  PTC_RETURN_IF_ERROR(ptc::check_members(req, {"op", "from", "job", "step", "version", "shard", "tensor", "lo", "len", "off", "n"},
                                         "peer.read request"));
  PTC_ASSIGN_OR_RETURN(std::string job, str(req, "job"));
  PTC_ASSIGN_OR_RETURN(std::string step, str(req, "step"));
  PTC_ASSIGN_OR_RETURN(std::string shard_name, str(req, "shard"));
  PTC_ASSIGN_OR_RETURN(std::string tensor, str(req, "tensor"));
  PTC_ASSIGN_OR_RETURN(int64_t version, num(req, "version"));
  PTC_ASSIGN_OR_RETURN(int64_t lo, num(req, "lo"));
  PTC_ASSIGN_OR_RETURN(int64_t len, num(req, "len"));
  PTC_ASSIGN_OR_RETURN(int64_t off, num(req, "off"));
  PTC_ASSIGN_OR_RETURN(int64_t n, num(req, "n"));
  const std::string name = job + "/" + step;
  if (static_cast<uint64_t>(n) > max_bytes)
    return ptc::error(ptc::Code::kResourceExhausted, "peer.read of " + std::to_string(n) + " bytes exceeds the limit of " +
                                                         std::to_string(max_bytes));
  auto v = store.find_version(job, step, static_cast<uint64_t>(version));
  if (!v) return ptc::not_found("version " + std::to_string(version) + " of " + name + " is not on this node");
  const auto id = ptc::parse_shard_name(shard_name);
  const ptc::Layout& layout = v->layout();
  const auto& shards = layout.shards();
  if (!id || std::find(shards.begin(), shards.end(), *id) == shards.end())
    return ptc::not_found(name + " has no shard '" + shard_name + "'");
  const ptc::TensorSpec* spec = layout.ptc().find(tensor);
  if (!spec) return ptc::not_found(name + " has no tensor '" + tensor + "'");
  const int j = layout.find_slice(*id, static_cast<size_t>(spec - layout.ptc().tensors.data()));
  if (j < 0) return ptc::not_found("shard " + shard_name + " of " + name + " does not hold tensor '" + tensor + "'");
  if (!v->holds(*id)) return ptc::error(ptc::Code::kUnavailable, "shard " + shard_name + " of " + name + " is not held on this node");

  const ptc::Slice& sl = layout.slices(*id)[static_cast<size_t>(j)];
  const ptc::SlabGeometry g = ptc::slab_geometry(*spec, sl.local_shape);
  if (lo + len > g.extent)
    return ptc::error(ptc::Code::kOutOfRange, "slab [" + std::to_string(lo) + ", " + std::to_string(lo + len) +
                                                  ") of tensor '" + tensor + "' lies outside its slice of " +
                                                  std::to_string(g.extent) + " along the split dimension");
  const uint64_t slab_row = static_cast<uint64_t>(len) * g.inner, slice_row = static_cast<uint64_t>(g.extent) * g.inner;
  const uint64_t slab_bytes = g.rows * slab_row;
  if (static_cast<uint64_t>(off) + static_cast<uint64_t>(n) > slab_bytes)
    return ptc::error(ptc::Code::kOutOfRange, "bytes [" + std::to_string(off) + ", " + std::to_string(off + n) +
                                                  ") lie outside the " + std::to_string(slab_bytes) +
                                                  "-byte slab of tensor '" + tensor + "'");

  auto rb = std::make_shared<fs::ReadBuffer>();
  SlabSink sink(tensor, *rb);
  // Row by row: window bytes [off, off + n) of the slab.
  for (uint64_t at = static_cast<uint64_t>(off), end = at + static_cast<uint64_t>(n); at < end;) {
    const uint64_t r = at / slab_row, col = at % slab_row, take = std::min(slab_row - col, end - at);
    PTC_RETURN_IF_ERROR(v->pieces(*id, static_cast<size_t>(j), r * slice_row + static_cast<uint64_t>(lo) * g.inner + col,
                                  take, sink));
    at += take;
  }
  // Many small pieces (a slice re-cut along a later dimension) go as one gathered buffer.
  PTC_RETURN_IF_ERROR(rb->gather_if_fragmented(64, 64 << 10));
  transport::Reply reply;
  transport::Payload& p = reply.payload;
  p.keep.push_back(v);   // the version's blobs stay while the reply is sent
  p.keep.push_back(rb);  // and the blobs it mapped, or its gathered copy
  for (const auto& seg : rb->segments()) p.add(seg.mem, seg.len);
  Xxh3Stream h;
  for (const auto& [ptr, cnt] : p.spans) h.update(ptr, cnt);
  reply.result = json{{"xxh3", h.digest()}, {"n", p.size}};
  return reply;
}

}  // namespace ptcfs
