#include "daemon/cluster/peer_service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "daemon/cluster/changes/part_context.h"
#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/slab_read.h"
#include "daemon/store/failpoint.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"

namespace ptcfs {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxPeerRead = 64 << 20;
// How long a peer read waits for a version this node has not committed yet (PeerService::read).
constexpr auto kBehindWait = std::chrono::seconds(2);

}  // namespace

std::string PeerService::id() const { return node_id(*peers_.cluster(), self_); }

// One row per peer operation: its name and its handler (which decodes the request).
struct PeerService::Op {
  const char* name;
  Result<transport::Reply> (PeerService::*handler)(const json& req);
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

Result<transport::Reply> PeerService::handle(const json& req) {
  PTC_ASSIGN_OR_RETURN(const std::string op, member_string(req, "op", "peer request"));
  for (const Op& o : kOps) {
    if (op != o.name) continue;
    auto r = (this->*o.handler)(req);
    // Refused reads are logged here (the reader names the node; this side names the request).
    if (!r && (o.handler == &PeerService::serve_samples || o.handler == &PeerService::serve_table))
      log::warn("refused {}: {}", op, r.status().to_string());
    return r;
  }
  return invalid("unknown peer operation '" + op + "'");
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

Result<transport::Reply> PeerService::read(const json& j) {
  auto req = read_request_from_json(j);
  auto r =
      req ? serve_slab_read(store_, *req, kMaxPeerRead, &digests_, &leases_) : Result<transport::Reply>(req.status());
  // A version the asker has committed and this node not yet (a node just restarted, whose kept
  // prepared change waits for its record, or one catching up) comes within moments: wait for it
  // rather than fail a reader's file (ENOENT) for a version that exists.
  if (req && !r && r.status().code() == Code::kNotFound && behind(store_, *req)) {
    const auto until = std::chrono::steady_clock::now() + kBehindWait;
    while (!r && r.status().code() == Code::kNotFound && std::chrono::steady_clock::now() < until &&
           behind(store_, *req)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      r = serve_slab_read(store_, *req, kMaxPeerRead, &digests_, &leases_);
    }
  }
  if (r) {
    sent_ += r->payload.size;
    metrics::peer_sent(req->from, r->payload.size);
  } else {
    log::warn("refused a peer read: {}", r.status().to_string());
  }
  return r;
}

Result<transport::Reply> PeerService::stats(const json& req) {
  PTC_RETURN_IF_ERROR(stats_request_from_json(req).status());
  return transport::Reply(to_json(PeerStats{sent_.load(), peers_.bytes_received()}));
}

Result<transport::Reply> PeerService::state(const json& j) {
  PTC_ASSIGN_OR_RETURN(const StateRequest req, state_request_from_json(j));
  auto snap = store_.snapshot();
  auto it = snap->steps.find({req.job, req.step});
  if (it == snap->steps.end()) return not_found("no step " + req.job + "/" + req.step + " on node " + id());
  const StepVersion& v = *it->second;
  StepState s{v.version(),      v.placement().nodes,   v.placement().gpus, {},
              v.layout().ptc(), v.placement().holders, v.origin()};
  for (const auto& sh : v.layout().shards())
    if (v.holds(sh)) s.held.push_back(sh.name());
  s.copy_origin = store_.durable_origin(req.job, req.step);
  return transport::Reply(to_json(s));
}

Result<transport::Reply> PeerService::prepare(const json& j) {
  PTC_ASSIGN_OR_RETURN(PrepareRequest req, prepare_request_from_json(j));
  // A fenced node answers, so it refuses (kFailedPrecondition): were it kUnavailable, a change
  // that leaves out unreachable nodes (dataset progress) would succeed without it while it goes
  // on serving the old state (docs/ARCHITECTURE.md "What holds under faults").
  if (auto fenced = members_.can_change(); !fenced) return error(Code::kFailedPrecondition, fenced.message());
  PTC_ASSIGN_OR_RETURN(Participant::Preparing preparing, parts_.begin(req.tx));
  PrepareReply reply;
  const PartContext ctx{store_, peers_, self_, id(), members_, saves_, options_, req.tx};
  auto change = prepare_part(ctx, req.change, reply);
  if (!change) {
    // Refused because a change of the same step or dataset is prepared here and undecided:
    // name its coordinator, who ends it (docs/FORMATS.md "Keys in etcd").
    const std::string job = datasets_of(req.change);
    return parts_.blocked(change.status(), req.tx, record_key(req.change), job, !job.empty())
        .with_context("node " + id());
  }
  failpoint("peer.prepared");
  std::optional<Participant::SavePart> save;
  if (auto saved = saved_step(req.change)) save = Participant::SavePart{saved->first, saved->second};
  PTC_RETURN_IF_ERROR(parts_.prepared(std::move(preparing), std::move(change).value(),
                                      Participant::Decider{record_key(req.change), req.coordinator, req.lease},
                                      std::move(save)));
  return transport::Reply(to_json(reply));
}

Result<transport::Reply> PeerService::commit(const json& j) {
  PTC_ASSIGN_OR_RETURN(const FinishRequest req, finish_request_from_json(j, true));
  PTC_RETURN_IF_ERROR(parts_.finish(req.tx, true));
  return transport::Reply(json::object());
}

Result<transport::Reply> PeerService::abort(const json& j) {
  PTC_ASSIGN_OR_RETURN(const FinishRequest req, finish_request_from_json(j, false));
  PTC_RETURN_IF_ERROR(parts_.finish(req.tx, false, req.why));
  return transport::Reply(json::object());
}

}  // namespace ptcfs
