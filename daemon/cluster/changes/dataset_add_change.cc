#include "daemon/cluster/changes/dataset_add_change.h"

#include <algorithm>

#include "daemon/cluster/changes/part_context.h"
#include "daemon/cluster/membership.h"
#include "daemon/dataset/dataset_ops.h"
#include "daemon/store/checksum.h"
#include "ptc/base/json_util.h"
#include "ptc/dataset.h"

namespace ptcfs {

namespace {
constexpr uint64_t kTableChunk = 16 << 20;  // bytes per peer.dataset_table (the home's limit too)
}  // namespace

Result<PreparedChange> prepare_part(const PartContext& ctx, const DatasetAddChange& c, PrepareReply&) {
  // Pull the home's sample table into a blob of our own.
  const std::string w = "peer.prepare record";
  PTC_ASSIGN_OR_RETURN(std::string home_id, member_string(c.record, "home", w));
  const int home = ctx.peers.cluster()->find(home_id);
  if (home < 0) return invalid("peer.prepare: the record's home is not a node of the cluster");
  PTC_ASSIGN_OR_RETURN(uint64_t num_samples, member_u64(c.record, "num_samples", w));
  PTC_ASSIGN_OR_RETURN(uint64_t digest, member_u64(c.record, "table_xxh3", w));
  if (num_samples > ptc::kMaxSamples) return invalid("peer.prepare: the record has too many samples");
  const uint64_t size = num_samples * sizeof(SampleRecord);
  PTC_ASSIGN_OR_RETURN(BlobWriter writer, ctx.store.blobs().create());
  const uint64_t table = writer.id();
  auto pull = [&]() -> Status {
    std::string buf;
    Xxh3Stream hash;
    for (uint64_t off = 0; off < size; off += kTableChunk) {
      const uint64_t n = std::min(kTableChunk, size - off);
      PTC_RETURN_IF_ERROR(ctx.peers.call_data(home, to_json(DatasetTableRequest{ctx.tx, off, n}), buf, n).status());
      if (buf.size() != n) return corrupt("short sample table chunk from the home node");
      hash.update(buf.data(), n);
      PTC_RETURN_IF_ERROR(writer.append(buf.data(), n));
    }
    if (hash.digest() != digest) return corrupt("the sample table pulled from the home node fails its checksum");
    return writer.finish();
  };
  if (auto s = pull(); !s) {
    ctx.store.blobs().settle(table);  // the writer removes its file
    return s;
  }
  return prepare_dataset_copy(ctx.store, c.job, c.name, c.record, table);
}

}  // namespace ptcfs
