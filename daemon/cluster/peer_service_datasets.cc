// The dataset half of the peer service (daemon/cluster/peer_service.h): the home node serves
// sample bytes (peer.samples) and, while an add is prepared, its sample table
// (peer.dataset_table); every node reports its position (peer.dataset_state) and, on
// peer.prepare of an add, pulls the home's table into a blob of its own.
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

ptc::Result<transport::Reply> PeerService::serve_samples(const json& req) {
  const std::string w = "peer.samples";
  PTC_RETURN_IF_ERROR(ptc::check_members(req, {"op", "from", "job", "name", "table_xxh3", "pieces"},
                                         "peer.samples request"));
  PTC_ASSIGN_OR_RETURN(std::string job, ptc::member_string(req, "job", w));
  PTC_ASSIGN_OR_RETURN(std::string name, ptc::member_string(req, "name", w));
  PTC_ASSIGN_OR_RETURN(uint64_t digest, ptc::member_u64(req, "table_xxh3", w));
  PTC_ASSIGN_OR_RETURN(auto v, current_dataset(store_, job, name));
  if (v->source().table_xxh3() != digest)
    return ptc::not_found("dataset " + job + "/" + name + " on node " + id() + " has other samples (it was re-added)");
  if (!v->source().local()) return ptc::not_found("the files of dataset " + job + "/" + name + " are not on node " + id());
  if (!req["pieces"].is_array() || req["pieces"].size() > kPiecesPerRequest)
    return ptc::invalid("peer.samples 'pieces' must be a list of at most " + std::to_string(kPiecesPerRequest));
  std::vector<fs::DatasetContent::Piece> pieces;
  uint64_t total = 0;
  for (const auto& p : req["pieces"]) {
    if (!p.is_array() || p.size() != 3 || !p[0].is_number_unsigned() || !p[1].is_number_unsigned() ||
        !p[2].is_number_unsigned() || p[0].get<uint64_t>() > ptc::kMaxSamples)
      return ptc::invalid("peer.samples: a piece is not [sample, offset, length]");
    pieces.push_back({static_cast<uint32_t>(p[0].get<uint64_t>()), p[1].get<uint64_t>(), p[2].get<uint64_t>()});
    total += pieces.back().len;
    if (pieces.back().len > kMaxSampleReply || total > kMaxSampleReply)
      return ptc::error(ptc::Code::kResourceExhausted, "peer.samples asks for more than " +
                                                           std::to_string(kMaxSampleReply) + " bytes");
  }
  fs::ReadBuffer rb;
  PTC_RETURN_IF_ERROR(v->source().read(pieces, rb));
  auto buf = std::make_shared<std::string>(rb.size(), '\0');
  PTC_RETURN_IF_ERROR(rb.copy_to(reinterpret_cast<std::byte*>(buf->data())));
  transport::Reply reply(json{{"xxh3", xxh3_of(buf->data(), buf->size())}});
  reply.payload.add(buf->data(), buf->size());
  reply.payload.keep.push_back(buf);
  sent_ += buf->size();
  ptc::metrics::peer_sent(ptc::member_string_or(req, "from", "").value_or(""), buf->size());
  return reply;
}

ptc::Result<transport::Reply> PeerService::serve_table(const json& req) {
  const std::string w = "peer.dataset_table";
  PTC_RETURN_IF_ERROR(ptc::check_members(req, {"op", "tx", "off", "n"}, "peer.dataset_table request"));
  PTC_ASSIGN_OR_RETURN(std::string tx, ptc::member_string(req, "tx", w));
  PTC_ASSIGN_OR_RETURN(uint64_t off, ptc::member_u64(req, "off", w));
  PTC_ASSIGN_OR_RETURN(uint64_t n, ptc::member_u64(req, "n", w));
  std::shared_ptr<const DatasetVersion> v;
  {
    std::lock_guard lock(mu_);
    auto it = prepared_.find(tx);
    if (it == prepared_.end() || it->second.change.datasets.size() != 1)
      return ptc::not_found("no dataset add " + tx + " prepared on node " + id());
    v = it->second.change.datasets.front().next;
  }
  const std::string_view table = v->source().table_bytes();
  if (n > kTableChunk || off > table.size() || n > table.size() - off)
    return ptc::error(ptc::Code::kOutOfRange, "peer.dataset_table: bytes [" + std::to_string(off) + ", +" +
                                                  std::to_string(n) + ") outside the table or over the chunk limit");
  transport::Reply reply(json{{"size", table.size()}});
  reply.payload.add(table.data() + off, n);
  reply.payload.keep.push_back(v);
  return reply;
}

ptc::Result<PreparedChange> PeerService::prepare_dataset_add(const std::string& tx, const DatasetAddChange& c) {
  // Pull the home's sample table into a blob of our own.
  const std::string w = "peer.prepare record";
  PTC_ASSIGN_OR_RETURN(std::string home_id, ptc::member_string(c.record, "home", w));
  const int home = peers_.cluster()->find(home_id);
  if (home < 0) return ptc::invalid("peer.prepare: the record's home is not a node of the cluster");
  PTC_ASSIGN_OR_RETURN(uint64_t num_samples, ptc::member_u64(c.record, "num_samples", w));
  PTC_ASSIGN_OR_RETURN(uint64_t digest, ptc::member_u64(c.record, "table_xxh3", w));
  if (num_samples > ptc::kMaxSamples) return ptc::invalid("peer.prepare: the record has too many samples");
  const uint64_t size = num_samples * sizeof(SampleRecord);
  PTC_ASSIGN_OR_RETURN(BlobWriter writer, store_.blobs().create());
  const uint64_t table = writer.id();
  auto pull = [&]() -> ptc::Status {
    std::string buf;
    Xxh3Stream hash;
    for (uint64_t off = 0; off < size; off += kTableChunk) {
      const uint64_t n = std::min(kTableChunk, size - off);
      PTC_RETURN_IF_ERROR(
          peers_.call_data(home, json{{"op", "peer.dataset_table"}, {"tx", tx}, {"off", off}, {"n", n}}, buf, n).status());
      if (buf.size() != n) return ptc::corrupt("short sample table chunk from the home node");
      hash.update(buf.data(), n);
      PTC_RETURN_IF_ERROR(writer.append(buf.data(), n));
    }
    if (hash.digest() != digest) return ptc::corrupt("the sample table pulled from the home node fails its checksum");
    return writer.finish();
  };
  if (auto s = pull(); !s) {
    store_.blobs().settle(table);  // the writer removes its file
    return s;
  }
  return prepare_dataset_copy(store_, c.job, c.name, c.record, table);
}

ptc::Result<json> PeerService::dataset_state(const json& req) const {
  PTC_ASSIGN_OR_RETURN(std::string job, ptc::member_string(req, "job", "peer.dataset_state"));
  PTC_ASSIGN_OR_RETURN(std::string name, ptc::member_string(req, "name", "peer.dataset_state"));
  PTC_ASSIGN_OR_RETURN(auto v, current_dataset(store_, job, name));
  const auto& p = v->position();
  return to_json(DatasetState{v->version(), static_cast<uint64_t>(p.dp), p.epoch, p.consumed, v->source().table_xxh3()});
}

}  // namespace ptcfs
