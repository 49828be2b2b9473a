#include "daemon/cluster/peer_service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/slab_read.h"
#include "daemon/dataset/dataset_ops.h"
#include "daemon/reshard/importer.h"
#include "daemon/store/checksum.h"
#include "daemon/store/failpoint.h"
#include "daemon/store/prepared_record.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"

namespace ptcfs {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxPeerRead = 64 << 20;
// How long a peer read waits for a version this node has not committed yet (PeerService::read).
constexpr auto kBehindWait = std::chrono::seconds(2);

// "{node}" in an import directory is this node's id.
std::string node_dir(std::string dir, const std::string& id) {
  for (size_t at; (at = dir.find("{node}")) != std::string::npos;) dir.replace(at, 6, id);
  return dir;
}

// The record that decides a change of this kind.
std::string record_key(const PrepareRequest& r) {
  return std::visit(
      [](const auto& c) -> std::string {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, DatasetAddChange> || std::is_same_v<T, DatasetProgressChange>)
          return etcd_dataset_key(c.job, c.name);
        else
          return etcd_step_key(c.job, c.step);
      },
      r.change);
}

// The job a change is of, and whether it may change that job's datasets (a progress; a
// repartition, which re-splits them).
std::pair<std::string, bool> dataset_change_of(const PrepareRequest& r) {
  return std::visit(
      [](const auto& c) -> std::pair<std::string, bool> {
        using T = std::decay_t<decltype(c)>;
        return {c.job, std::is_same_v<T, DatasetProgressChange> || std::is_same_v<T, RepartitionChange>};
      },
      r.change);
}

// A repartition re-splits on this node the datasets, at the versions, that the coordinator
// re-split: else the nodes would serve different splits after it (a node catching up on a
// progress it missed has another version).
ptc::Status same_datasets(const RepartitionChange& c, const std::vector<DatasetChange>& here) {
  if (!c.datasets) return ptc::Status::ok();  // a coordinator of an older build
  const std::map<std::string, uint64_t>& want = *c.datasets;
  const std::map<std::string, uint64_t> have = resplit_versions(here);
  if (have == want) return ptc::Status::ok();
  const auto text = [](const std::map<std::string, uint64_t>& m) {
    std::string out;
    for (const auto& [name, version] : m)
      out += (out.empty() ? "" : ", ") + name + " version " + std::to_string(version);
    return out.empty() ? std::string("none") : out;
  };
  return ptc::error(ptc::Code::kFailedPrecondition, "the datasets of job '" + c.job + "' to re-split differ: here " +
                                                        text(have) + ", at the coordinator " + text(want) +
                                                        " (a node catching up; try again in a moment)");
}

}  // namespace

std::string PeerService::id() const { return node_id(*peers_.cluster(), self_); }

// One row per peer operation: its name and its handler (which decodes the request).
struct PeerService::Op {
  const char* name;
  ptc::Result<transport::Reply> (PeerService::*handler)(const json& req);
};

const PeerService::Op PeerService::kOps[] = {
    {"peer.read", &PeerService::read},
    {"peer.samples", &PeerService::serve_samples},
    {"peer.dataset_table", &PeerService::serve_table},
    {"peer.state", &PeerService::state},
    {"peer.save_state", &PeerService::save_state},
    {"peer.save_ready", &PeerService::save_ready},
    {"peer.dcp_files", &PeerService::dcp_files},
    {"peer.dcp_read", &PeerService::dcp_read},
    {"peer.dcp_convert", &PeerService::dcp_convert},
    {"peer.dataset_state", &PeerService::dataset_state},
    {"peer.stats", &PeerService::stats},
    {"peer.prepare", &PeerService::prepare},
    {"peer.commit", &PeerService::commit},
    {"peer.abort", &PeerService::abort},
};

ptc::Result<transport::Reply> PeerService::handle(const json& req) {
  PTC_ASSIGN_OR_RETURN(const std::string op, ptc::member_string(req, "op", "peer request"));
  for (const Op& o : kOps) {
    if (op != o.name) continue;
    auto r = (this->*o.handler)(req);
    // Refused reads are logged here (the reader names the node; this side names the request).
    if (!r && (o.handler == &PeerService::serve_samples || o.handler == &PeerService::serve_table))
      ptc::log::warn("refused {}: {}", op, r.status().to_string());
    return r;
  }
  return ptc::invalid("unknown peer operation '" + op + "'");
}

namespace {

// Whether this node serves an older version of the step than `version` (or none of it): the
// asker saw a commit this node has not applied yet.
bool behind(const Store& store, const ReadRequest& req) {
  const auto snap = store.snapshot();
  const auto it = snap->steps.find({req.job, req.step});
  return it == snap->steps.end() || it->second->version() < req.version;
}

}  // namespace

ptc::Result<transport::Reply> PeerService::read(const json& j) {
  auto req = read_request_from_json(j);
  auto r = req ? serve_slab_read(store_, *req, kMaxPeerRead, &digests_, &leases_)
               : ptc::Result<transport::Reply>(req.status());
  // A version the asker has committed and this node not yet (a node just restarted, whose kept
  // prepared change waits for its record, or one catching up) comes within moments: wait for it
  // rather than fail a reader's file (ENOENT) for a version that exists.
  if (req && !r && r.status().code() == ptc::Code::kNotFound && behind(store_, *req)) {
    const auto until = std::chrono::steady_clock::now() + kBehindWait;
    while (!r && r.status().code() == ptc::Code::kNotFound && std::chrono::steady_clock::now() < until &&
           behind(store_, *req)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      r = serve_slab_read(store_, *req, kMaxPeerRead, &digests_, &leases_);
    }
  }
  if (r) {
    sent_ += r->payload.size;
    ptc::metrics::peer_sent(req->from, r->payload.size);
  } else {
    ptc::log::warn("refused a peer read: {}", r.status().to_string());
  }
  return r;
}

ptc::Result<transport::Reply> PeerService::stats(const json& req) {
  PTC_RETURN_IF_ERROR(stats_request_from_json(req).status());
  return transport::Reply(to_json(PeerStats{sent_.load(), peers_.bytes_received()}));
}

ptc::Result<transport::Reply> PeerService::state(const json& j) {
  PTC_ASSIGN_OR_RETURN(const StateRequest req, state_request_from_json(j));
  auto snap = store_.snapshot();
  auto it = snap->steps.find({req.job, req.step});
  if (it == snap->steps.end()) return ptc::not_found("no step " + req.job + "/" + req.step + " on node " + id());
  const StepVersion& v = *it->second;
  StepState s{v.version(), v.placement().nodes, v.placement().gpus, {}, v.layout().ptc(), v.placement().holders};
  for (const auto& sh : v.layout().shards())
    if (v.holds(sh)) s.held.push_back(sh.name());
  return transport::Reply(to_json(s));
}

ptc::Result<PreparedChange> PeerService::prepare_import(const ImportChange& c, PrepareReply& reply) {
  ImportSummary sum;
  ptc::Ptc seen;
  auto place = [&](const ptc::Layout& layout) -> ptc::Result<StepPlacement> {
    seen = layout.ptc();
    // Pinned as the coordinator saw them (a node's own view if it sent none).
    const std::vector<int> gpus = c.gpus.empty() ? ptc::gpus_of(*peers_.cluster(), c.nodes) : c.gpus;
    PTC_ASSIGN_OR_RETURN(auto holders, ptc::shard_nodes_on(layout, *peers_.cluster(), c.nodes, gpus));
    StepPlacement p{c.nodes, gpus, {}, {}};
    for (const auto& h : holders) p.held.push_back(std::find(h.begin(), h.end(), self_) != h.end());
    return p;
  };
  PTC_ASSIGN_OR_RETURN(PreparedChange change,
                       ptcfs::prepare_import(store_, node_dir(c.dir, id()), c.job, c.step, place, sum));
  const std::string text = ptc::ptc_to_json(seen);
  reply.shards = sum.shards;
  reply.bytes = sum.bytes;
  reply.ptc_digest = xxh3_of(text.data(), text.size());
  reply.tensors = seen.tensors.size();
  return change;
}

ptc::Result<PreparedChange> PeerService::prepare_part(const PrepareRequest& req, PrepareReply& reply) {
  if (const auto* c = std::get_if<ImportChange>(&req.change)) {
    members_.learn(c->nodes);
    return prepare_import(*c, reply);
  }
  if (const auto* c = std::get_if<RepartitionChange>(&req.change)) {
    std::vector<std::string> ids = c->to_nodes;
    ids.insert(ids.end(), c->from_nodes.begin(), c->from_nodes.end());
    for (const auto& h : c->from_holders) ids.insert(ids.end(), h.begin(), h.end());
    members_.learn(ids);
    // The job's datasets follow its dp, in the same commit, re-split from the versions the
    // coordinator re-split and claimed before the part is prepared (its pulls take a while):
    // no other change of them is prepared here until this one is decided.
    PTC_ASSIGN_OR_RETURN(auto datasets, resplit_datasets(store_, c->job, c->to.dp, c->global_batch));
    PreparedChange held(store_);
    held.datasets = std::move(datasets);
    PTC_RETURN_IF_ERROR(same_datasets(*c, held.datasets));
    PTC_RETURN_IF_ERROR(held.claim_datasets(store_));
    PTC_ASSIGN_OR_RETURN(PreparedChange change, prepare_repartition_part(store_, peers_, self_, *c, options_));
    change.datasets = std::move(held.datasets);
    for (Claim& claim : held.claims) change.claims.push_back(std::move(claim));
    reply.bytes_received = change.bytes_received;
    return change;
  }
  if (const auto* c = std::get_if<DatasetAddChange>(&req.change)) return prepare_dataset_add(req.tx, *c);
  if (const auto* c = std::get_if<DatasetProgressChange>(&req.change)) {
    PTC_ASSIGN_OR_RETURN(PreparedChange change,
                         prepare_dataset_progress(store_, c->job, c->name, c->epoch, c->consumed, c->from_version,
                                                  c->dp, c->global_batch, c->batch_offset));
    PTC_RETURN_IF_ERROR(change.claim_datasets(store_));
    return change;
  }
  if (const auto* c = std::get_if<RemoveChange>(&req.change)) {
    auto change = prepare_removal(store_, c->job, c->step);
    if (!change && change.status().code() == ptc::Code::kNotFound) return PreparedChange{};  // never had it
    return change;
  }
  if (const auto* c = std::get_if<SaveChange>(&req.change)) return prepare_save(*c, reply);
  return ptc::internal("peer.prepare: a change of no known kind");
}

ptc::Result<transport::Reply> PeerService::prepare(const json& j) {
  PTC_ASSIGN_OR_RETURN(PrepareRequest req, prepare_request_from_json(j));
  // A fenced node answers, so it refuses (kFailedPrecondition): were it kUnavailable, a change
  // that leaves out unreachable nodes (dataset progress) would succeed without it while it goes
  // on serving the old state (docs/ARCHITECTURE.md "What holds under faults").
  if (auto fenced = members_.can_change(); !fenced) return ptc::error(ptc::Code::kFailedPrecondition, fenced.message());
  PTC_ASSIGN_OR_RETURN(Participant::Preparing preparing, parts_.begin(req.tx));
  PrepareReply reply;
  auto change = prepare_part(req, reply);
  if (!change) {
    // Refused because a change of the same step or dataset is prepared here and undecided:
    // name its coordinator, who ends it (docs/FORMATS.md "Keys in etcd").
    const auto [job, datasets] = dataset_change_of(req);
    return parts_.blocked(change.status(), req.tx, record_key(req), job, datasets).with_context("node " + id());
  }
  failpoint("peer.prepared");
  std::optional<Participant::SavePart> save;
  if (const auto* c = std::get_if<SaveChange>(&req.change)) save = Participant::SavePart{c->job, c->step};
  PTC_RETURN_IF_ERROR(parts_.prepared(std::move(preparing), std::move(change).value(),
                                      Participant::Decider{record_key(req), req.coordinator, req.lease},
                                      std::move(save)));
  return transport::Reply(to_json(reply));
}

ptc::Result<transport::Reply> PeerService::commit(const json& j) {
  PTC_ASSIGN_OR_RETURN(const FinishRequest req, finish_request_from_json(j, true));
  PTC_RETURN_IF_ERROR(parts_.finish(req.tx, true));
  return transport::Reply(json::object());
}

ptc::Result<transport::Reply> PeerService::abort(const json& j) {
  PTC_ASSIGN_OR_RETURN(const FinishRequest req, finish_request_from_json(j, false));
  PTC_RETURN_IF_ERROR(parts_.finish(req.tx, false, req.why));
  return transport::Reply(json::object());
}

}  // namespace ptcfs
