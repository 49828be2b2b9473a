// The dataset half of the peer service (daemon/cluster/peer_service.h): the home node serves
// sample bytes (peer.samples) and, while an add is prepared, its sample table
// (peer.dataset_table); every node reports its position (peer.dataset_state). On peer.prepare
// of an add each pulls the home's table into a blob of its own (daemon/cluster/changes/dataset_add_change.h).
#include <algorithm>

#include "daemon/cluster/nodes.h"
#include "daemon/cluster/peer_service.h"
#include "daemon/dataset/dataset_ops.h"
#include "daemon/store/checksum.h"
#include "ptc/base/json_util.h"
#include "ptc/base/metrics.h"

namespace ptcfs {

using nlohmann::json;

namespace {
constexpr uint64_t kTableChunk = 16 << 20;
constexpr size_t kPiecesPerRequest = 4096;
constexpr uint64_t kMaxSampleReply = 64 << 20;
}  // namespace

Result<transport::Reply> PeerService::serve_samples(const json& j) {
  PTC_ASSIGN_OR_RETURN(const SamplesRequest req, samples_request_from_json(j));
  PTC_ASSIGN_OR_RETURN(auto v, current_dataset(store_, req.job, req.name));
  const std::string name = req.job + "/" + req.name;
  if (v->source().table_xxh3() != req.table_xxh3)
    return not_found("dataset " + name + " on node " + id() + " has other samples (it was re-added)");
  if (!v->source().local()) return not_found("the files of dataset " + name + " are not on node " + id());
  if (req.pieces.size() > kPiecesPerRequest)
    return invalid("peer.samples 'pieces' must be a list of at most " + std::to_string(kPiecesPerRequest));
  std::vector<fs::DatasetContent::Piece> pieces;
  uint64_t total = 0;
  for (const auto& p : req.pieces) {
    if (p.sample > ptc::kMaxSamples) return invalid("peer.samples: a piece is not [sample, offset, length]");
    pieces.push_back({static_cast<uint32_t>(p.sample), p.off, p.len});
    total += p.len;
    if (p.len > kMaxSampleReply || total > kMaxSampleReply)
      return error(Code::kResourceExhausted,
                   "peer.samples asks for more than " + std::to_string(kMaxSampleReply) + " bytes");
  }
  fs::ReadBuffer rb;
  PTC_RETURN_IF_ERROR(v->source().read(pieces, rb));
  auto buf = std::make_shared<std::string>(rb.size(), '\0');
  PTC_RETURN_IF_ERROR(rb.copy_to(reinterpret_cast<std::byte*>(buf->data())));
  transport::Reply reply(json{{"xxh3", xxh3_of(buf->data(), buf->size())}});
  reply.payload.add(buf->data(), buf->size());
  reply.payload.keep.push_back(buf);
  sent_ += buf->size();
  metrics::peer_sent(req.from, buf->size());
  return reply;
}

Result<transport::Reply> PeerService::serve_table(const json& j) {
  PTC_ASSIGN_OR_RETURN(const DatasetTableRequest req, dataset_table_request_from_json(j));
  const std::string& tx = req.tx;
  const uint64_t off = req.off, n = req.n;
  const std::shared_ptr<const DatasetVersion> v = parts_.dataset_added(tx);
  if (!v) return not_found("no dataset add " + tx + " prepared on node " + id());
  const std::string_view table = v->source().table_bytes();
  if (n > kTableChunk || off > table.size() || n > table.size() - off)
    return error(Code::kOutOfRange, "peer.dataset_table: bytes [" + std::to_string(off) + ", +" + std::to_string(n) +
                                        ") outside the table or over the chunk limit");
  transport::Reply reply(json{{"size", table.size()}});
  reply.payload.add(table.data() + off, n);
  reply.payload.keep.push_back(v);
  return reply;
}

Result<transport::Reply> PeerService::dataset_state(const json& j) {
  PTC_ASSIGN_OR_RETURN(const DatasetStateRequest req, dataset_state_request_from_json(j));
  PTC_ASSIGN_OR_RETURN(auto v, current_dataset(store_, req.job, req.name));
  const auto& p = v->position();
  return transport::Reply(to_json(DatasetState{v->version(), static_cast<uint64_t>(p.dp), p.epoch, p.consumed,
                                               v->source().table_xxh3(), v->spec().global_batch, p.batch_offset}));
}

}  // namespace ptcfs
