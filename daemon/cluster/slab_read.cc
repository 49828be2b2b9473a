#include "daemon/cluster/slab_read.h"

#include "daemon/store/checksum.h"
#include "daemon/store/failpoint.h"

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
  Status blob(const std::shared_ptr<const BlobFile>& file, uint64_t off, uint64_t n) override {
    fs::ReadBuffer& buf = out(file);
    const std::byte* map = file->data();
    if (!map || off + n > file->mapped_size())
      return corrupt("blob " + std::to_string(file->id()) + " is shorter than the metadata of '" + tensor_ + "' says");
    buf.add_mem(map + off, n);
    return Status::ok();
  }

 private:
  const std::string& tensor_;
};

}  // namespace

Result<transport::Reply> serve_slab_read(Store& store, const ReadRequest& req, uint64_t max_bytes, SlabDigests* digests,
                                         ReadLeases* leases) {
  const std::string &job = req.job, &step = req.step, &shard_name = req.shard, &tensor = req.tensor;
  const uint64_t version = req.version;
  if (req.n > max_bytes)
    return error(Code::kResourceExhausted,
                 "peer.read of " + std::to_string(req.n) + " bytes exceeds the limit of " + std::to_string(max_bytes));
  // Bounded here so that the slab arithmetic below cannot wrap.
  if (req.lo > INT64_MAX / 2 || req.len > INT64_MAX / 2 || req.off > INT64_MAX / 2)
    return error(Code::kOutOfRange, "peer.read: a position beyond 2^62");
  const int64_t lo = static_cast<int64_t>(req.lo), len = static_cast<int64_t>(req.len),
                off = static_cast<int64_t>(req.off), n = static_cast<int64_t>(req.n);
  const std::string name = job + "/" + step;
  auto v = store.find_version(job, step, static_cast<uint64_t>(version));
  if (!v) return not_found("version " + std::to_string(version) + " of " + name + " is not on this node");
  if (leases && req.hold) leases->touch(v);  // a file open on the reader's node reads on after a change
  const auto id = ptc::parse_shard_name(shard_name);
  const ptc::Layout& layout = v->layout();
  const auto& shards = layout.shards();
  if (!id || std::find(shards.begin(), shards.end(), *id) == shards.end())
    return not_found(name + " has no shard '" + shard_name + "'");
  const ptc::TensorSpec* spec = layout.ptc().find(tensor);
  if (!spec) return not_found(name + " has no tensor '" + tensor + "'");
  const int j = layout.find_slice(*id, static_cast<size_t>(spec - layout.ptc().tensors.data()));
  if (j < 0) return not_found("shard " + shard_name + " of " + name + " does not hold tensor '" + tensor + "'");
  if (!v->holds(*id))
    return error(Code::kUnavailable, "shard " + shard_name + " of " + name + " is not held on this node");

  const ptc::Slice& sl = layout.slices(*id)[static_cast<size_t>(j)];
  const ptc::SlabGeometry g = ptc::slab_geometry(*spec, sl.local_shape);
  if (lo + len > g.extent)
    return error(Code::kOutOfRange, "slab [" + std::to_string(lo) + ", " + std::to_string(lo + len) + ") of tensor '" +
                                        tensor + "' lies outside its slice of " + std::to_string(g.extent) +
                                        " along the split dimension");
  const uint64_t slab_row = static_cast<uint64_t>(len) * g.inner, slice_row = static_cast<uint64_t>(g.extent) * g.inner;
  const uint64_t slab_bytes = g.rows * slab_row;
  if (static_cast<uint64_t>(off) + static_cast<uint64_t>(n) > slab_bytes)
    return error(Code::kOutOfRange, "bytes [" + std::to_string(off) + ", " + std::to_string(off + n) +
                                        ") lie outside the " + std::to_string(slab_bytes) + "-byte slab of tensor '" +
                                        tensor + "'");

  auto rb = std::make_shared<fs::ReadBuffer>();
  SlabSink sink(tensor, *rb);
  // Row by row: window bytes [off, off + n) of the slab.
  for (uint64_t at = static_cast<uint64_t>(off), end = at + static_cast<uint64_t>(n); at < end;) {
    const uint64_t r = at / slab_row, col = at % slab_row, take = std::min(slab_row - col, end - at);
    PTC_RETURN_IF_ERROR(
        v->pieces(*id, static_cast<size_t>(j), r * slice_row + static_cast<uint64_t>(lo) * g.inner + col, take, sink));
    at += take;
  }
  // Many small pieces (a slice re-cut along a later dimension) go as one gathered buffer.
  PTC_RETURN_IF_ERROR(rb->gather_if_fragmented(64, 64 << 10));
  transport::Reply reply;
  transport::Payload& p = reply.payload;
  p.keep.push_back(v);   // the version's blobs stay while the reply is sent
  p.keep.push_back(rb);  // and the blobs it mapped, or its gathered copy
  for (const auto& seg : rb->segments()) p.add(seg.mem, seg.len);
  const std::string key = shard_name + '\n' + tensor + '\n' + std::to_string(lo) + ' ' + std::to_string(len) + ' ' +
                          std::to_string(off) + ' ' + std::to_string(n);
  std::optional<uint64_t> known = digests ? digests->find(v->serial(), key) : std::nullopt;
  if (!known) {
    Xxh3Stream h;
    for (const auto& [ptr, cnt] : p.spans) h.update(ptr, cnt);
    known = h.digest();
    if (digests) digests->put(v->serial(), key, *known);
  }
  uint64_t digest = *known;
  if (failpoint_switch("peer.read.damage")) digest ^= 1;  // a test's damaged transfer
  reply.result = json{{"xxh3", digest}, {"n", p.size}};
  return reply;
}

}  // namespace ptcfs
