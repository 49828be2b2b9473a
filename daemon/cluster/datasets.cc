// Datasets on a cluster (the ClusterNode half for them, daemon/cluster/node.h):
//
// - add: the node the CLI talks to holds the files (its "home"). It indexes them into a
//   pending sample table; every other node pulls that table (peer.dataset_table, verified
//   by its XXH3) and records the dataset with the same home; then all commit, or none.
// - progress: every reachable node prepares the new position, then all commit.
// - reads: a node that is not the home reads sample bytes from it (peer.samples), a batch
//   of records per mount read, verified by XXH3.
#include <xxhash.h>

#include <algorithm>

#include "daemon/cluster/node.h"
#include "daemon/control/util.h"
#include "daemon/dataset/dataset_ops.h"
#include "daemon/cluster/slab_read.h"
#include "ptc/json_util.h"
#include "ptc/log.h"

namespace ptcfs {

using nlohmann::json;

namespace {

constexpr uint64_t kTableChunk = 16 << 20;
constexpr size_t kPiecesPerRequest = 4096;
constexpr uint64_t kMaxSampleReply = 64 << 20;

}  // namespace

const std::string& ClusterNode::self_id() const { return id(); }

ptc::Status ClusterNode::read_samples(const DatasetVersion& v, const std::vector<fs::DatasetContent::Piece>& pieces,
                                      fs::ReadBuffer& out) const {
  const int home = cluster().find(v.home());
  if (home < 0) return ptc::error(ptc::Code::kUnavailable, "dataset " + v.job() + "/" + v.name() + ": its home node '" +
                                                               v.home() + "' is not in the cluster");
  for (size_t first = 0; first < pieces.size(); first += kPiecesPerRequest) {
    const size_t last = std::min(pieces.size(), first + kPiecesPerRequest);
    json list = json::array();
    uint64_t total = 0;
    for (size_t i = first; i < last; ++i) {
      list.push_back({pieces[i].sample, pieces[i].off, pieces[i].len});
      total += pieces[i].len;
    }
    const json req = {{"op", "peer.samples"}, {"job", v.job()}, {"name", v.name()},
                      {"table_xxh3", v.source().table_xxh3()}, {"pieces", std::move(list)}};
    auto buf = std::make_shared<std::string>();
    auto r = peers_->call_data(home, req, *buf, total);
    if (!r) return r.status().with_context("reading samples of " + v.job() + "/" + v.name() + " from node " + v.home());
    if (buf->size() != total || !r->contains("xxh3") || (*r)["xxh3"].get<uint64_t>() != xxh3_of(buf->data(), total))
      return ptc::corrupt("samples of " + v.job() + "/" + v.name() + " from node " + v.home() + " fail their checksum");
    out.add_mem(buf->data(), buf->size());
    out.keep(std::move(buf));
  }
  return ptc::Status::ok();
}

ptc::Result<transport::Reply> ClusterNode::serve_samples(const json& req) {
  PTC_RETURN_IF_ERROR(ptc::check_members(req, {"op", "job", "name", "table_xxh3", "pieces"}, "peer.samples request"));
  PTC_ASSIGN_OR_RETURN(std::string job, required_string(req, "job"));
  PTC_ASSIGN_OR_RETURN(std::string name, required_string(req, "name"));
  PTC_ASSIGN_OR_RETURN(uint64_t digest, required_u64(req, "table_xxh3"));
  PTC_ASSIGN_OR_RETURN(auto v, current_dataset(*store_, job, name));
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
  return reply;
}

ptc::Result<transport::Reply> ClusterNode::serve_table(const json& req) {
  PTC_RETURN_IF_ERROR(ptc::check_members(req, {"op", "tx", "off", "n"}, "peer.dataset_table request"));
  PTC_ASSIGN_OR_RETURN(std::string tx, required_string(req, "tx"));
  PTC_ASSIGN_OR_RETURN(uint64_t off, required_u64(req, "off"));
  PTC_ASSIGN_OR_RETURN(uint64_t n, required_u64(req, "n"));
  std::shared_ptr<const DatasetVersion> v;
  {
    std::lock_guard lock(mu_);
    auto it = prepared_.find(tx);
    if (it == prepared_.end() || it->second.datasets.size() != 1)
      return ptc::not_found("no dataset add " + tx + " prepared on node " + id());
    v = it->second.datasets.front().next;
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

ptc::Result<PreparedChange> ClusterNode::prepare_dataset_part(const json& req) {
  const std::string kind = req.value("kind", "");
  PTC_ASSIGN_OR_RETURN(std::string job, required_string(req, "job"));
  PTC_ASSIGN_OR_RETURN(std::string name, required_string(req, "name"));
  if (kind == "dataset_progress") {
    PTC_ASSIGN_OR_RETURN(uint64_t from, required_u64(req, "from_version"));
    PTC_ASSIGN_OR_RETURN(uint64_t epoch, required_u64(req, "epoch"));
    PTC_ASSIGN_OR_RETURN(uint64_t consumed, required_u64(req, "consumed"));
    return prepare_dataset_progress(*store_, job, name, epoch, consumed, from);
  }
  // dataset_add: pull the home's sample table into a blob of our own.
  PTC_ASSIGN_OR_RETURN(std::string tx, required_string(req, "tx"));
  if (!req.contains("record") || !req["record"].is_object()) return ptc::invalid("peer.prepare lacks 'record'");
  const json& record = req["record"];
  const int home = cluster().find(record.value("home", ""));
  if (home < 0) return ptc::invalid("peer.prepare: the record's home is not a node of the cluster");
  const uint64_t size = record.value("num_samples", uint64_t{0}) * sizeof(SampleRecord);
  const uint64_t digest = record.value("table_xxh3", uint64_t{0});
  PTC_ASSIGN_OR_RETURN(BlobWriter w, store_->blobs().create());
  const uint64_t table = w.id();
  auto pull = [&]() -> ptc::Status {
    std::string buf;
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    ptc::Status s;
    for (uint64_t off = 0; off < size && s; off += kTableChunk) {
      const uint64_t n = std::min(kTableChunk, size - off);
      auto r = peers_->call_data(home, json{{"op", "peer.dataset_table"}, {"tx", tx}, {"off", off}, {"n", n}}, buf, n);
      if (!r) s = r.status();
      else if (buf.size() != n) s = ptc::corrupt("short sample table chunk from the home node");
      else {
        XXH3_64bits_update(st, buf.data(), n);
        s = w.append(buf.data(), n);
      }
    }
    const uint64_t got = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    PTC_RETURN_IF_ERROR(s);
    if (got != digest) return ptc::corrupt("the sample table pulled from the home node fails its checksum");
    return w.finish();
  };
  if (auto s = pull(); !s) {
    store_->blobs().settle(table);  // the writer removes its file
    return s;
  }
  return prepare_dataset_copy(*store_, job, name, record, table);
}

ptc::Result<json> ClusterNode::dataset_add(const DatasetAddRequest& req, int dp, const IndexProgress& progress) {
  const std::vector<int> all = all_nodes();
  json summary;
  PTC_ASSIGN_OR_RETURN(PreparedChange mine, prepare_dataset_add(*store_, req, dp, id(), summary, progress));
  const json record = mine.datasets.front().next->to_json();
  const std::string tx = new_transaction_id();
  {
    std::lock_guard lock(mu_);
    prepared_.emplace(tx, std::move(mine));
  }
  const std::vector<int> others = other_nodes();
  const auto answers = ask_all(others, [&](int) {
    return json{{"op", "peer.prepare"}, {"tx", tx}, {"kind", "dataset_add"}, {"job", req.job}, {"name", req.name},
                {"record", record}};
  });
  ptc::Status failed;
  for (const auto& a : answers)
    if (!a.result && failed.is_ok()) failed = a.result.status();
  if (!failed.is_ok()) {
    (void)finish_all(all, tx, false);
    return failed.with_context("dataset " + req.job + "/" + req.name + " added on no node");
  }
  PTC_RETURN_IF_ERROR(finish_all(all, tx, true).with_context("dataset " + req.job + "/" + req.name + " added partly"));
  summary["nodes"] = all.size();
  return summary;
}

ptc::Result<json> ClusterNode::dataset_progress(const std::string& job, const std::string& name,
                                                std::optional<uint64_t> epoch, uint64_t consumed) {
  PTC_ASSIGN_OR_RETURN(auto cur, current_dataset(*store_, job, name));
  // Validate here first: a bad request is refused before any node is asked.
  PTC_ASSIGN_OR_RETURN(PreparedChange check, prepare_dataset_progress(*store_, job, name, epoch, consumed));
  const json next = dataset_json(*check.datasets.front().next);
  const std::vector<int> all = all_nodes();
  const std::string tx = new_transaction_id();
  const auto answers = ask_all(all, [&](int) {
    return json{{"op", "peer.prepare"}, {"tx", tx}, {"kind", "dataset_progress"}, {"job", job}, {"name", name},
                {"from_version", cur->version()}, {"epoch", epoch.value_or(cur->position().epoch)},
                {"consumed", consumed}};
  });
  // A node that cannot be reached catches up when it comes back; any other failure aborts.
  std::vector<int> prepared;
  ptc::Status failed;
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& r = answers[i].result;
    if (r) prepared.push_back(all[i]);
    else if (r.status().code() == ptc::Code::kUnavailable && all[i] != self_)
      ptc::log::warn("dataset progress of {}/{}: node {} is unreachable: {}", job, name,
                     cluster().nodes[static_cast<size_t>(all[i])].id, r.status().to_string());
    else if (failed.is_ok()) failed = r.status();
  }
  if (!failed.is_ok()) {
    (void)finish_all(prepared, tx, false);
    return failed.with_context("progress of dataset " + job + "/" + name + " refused; nothing changed");
  }
  PTC_RETURN_IF_ERROR(finish_all(prepared, tx, true).with_context("progress of " + job + "/" + name + " committed partly"));
  return next;
}

size_t ClusterNode::catch_up_datasets() {
  const std::vector<int> others = other_nodes();
  size_t caught = 0;
  const auto snap = store_->snapshot();
  for (const auto& [key, v] : snap->datasets) {
    const auto answers = ask_all(others, [&](int) {
      return json{{"op", "peer.dataset_state"}, {"job", key.first}, {"name", key.second}};
    });
    const json* newest = nullptr;
    for (const auto& a : answers) {
      if (!a.result || (*a.result).value("table_xxh3", uint64_t{0}) != v->source().table_xxh3()) continue;
      if ((*a.result).value("version", uint64_t{0}) > (newest ? (*newest)["version"].get<uint64_t>() : v->version()))
        newest = &*a.result;
    }
    if (!newest) continue;
    ptc::DatasetPosition pos;
    pos.dp = (*newest).value("dp", 1);
    pos.epoch = (*newest).value("epoch", uint64_t{0});
    pos.consumed = (*newest).value("consumed", uint64_t{0});
    if (!ptc::check_position(v->spec(), pos)) continue;
    // Take the peers' version number, so later changes agree on it.
    auto adopted = v->with_position(pos, (*newest)["version"].get<uint64_t>());
    if (auto s = store_->commit_datasets({{adopted, v}}); !s) {
      ptc::log::warn("catching up dataset {}/{}: {}", key.first, key.second, s.to_string());
      continue;
    }
    ptc::log::info("dataset {}/{} moved to version {} while this node was down; caught up", key.first, key.second,
                   adopted->version());
    ++caught;
  }
  return caught;
}

ptc::Result<json> ClusterNode::dataset_state(const json& req) const {
  PTC_ASSIGN_OR_RETURN(std::string job, required_string(req, "job"));
  PTC_ASSIGN_OR_RETURN(std::string name, required_string(req, "name"));
  PTC_ASSIGN_OR_RETURN(auto v, current_dataset(*store_, job, name));
  return json{{"version", v->version()},       {"dp", v->position().dp}, {"epoch", v->position().epoch},
              {"consumed", v->position().consumed}, {"table_xxh3", v->source().table_xxh3()}};
}

}  // namespace ptcfs
