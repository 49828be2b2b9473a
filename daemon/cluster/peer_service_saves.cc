// The save half of the peer service (daemon/cluster/peer_service.h): a node reports its part
// of a step being saved into its mount (peer.save_state), and prepares it as its part of the
// cluster's commit (peer.prepare of kind "save"): the shards it wrote, or, when it wrote none,
// a version that holds nothing (every mount shows every step); and, for a stock DCP save whose
// ranks wrote through several nodes' mounts, its staged files and its part's conversion
// (daemon/cluster/dcp_save_ops.h).
#include <algorithm>
#include <ctime>
#include <set>

#include "daemon/cluster/dcp_save_ops.h"
#include "daemon/cluster/nodes.h"
#include "daemon/cluster/peer_service.h"
#include "daemon/store/checksum.h"
#include "ptc/base/json_util.h"

namespace ptcfs {

using nlohmann::json;

ptc::Result<transport::Reply> PeerService::save_state(const json& j) {
  PTC_ASSIGN_OR_RETURN(const SaveStateRequest req, save_state_request_from_json(j));
  SaveState st;
  const auto p = saves_.part_state(req.job, req.step);
  st.pending = p.pending;
  st.ready = p.ready;
  st.ptc_digest = p.ptc_digest;
  st.complete = p.complete;
  if (!p.ptc_text.empty()) {
    auto parsed = ptc::parse_ptc_json(p.ptc_text, req.job + "/" + req.step + "/ptc.json");
    if (parsed) st.ptc = std::move(parsed).value();
  }
  return transport::Reply(to_json(st));
}

ptc::Result<transport::Reply> PeerService::save_ready(const json& j) {
  PTC_ASSIGN_OR_RETURN(const SaveReadyRequest req, save_ready_request_from_json(j));
  saves_.note_ready(req.job, req.step);  // the node's ticker asks for the commit (ChangeRunner::save_commit)
  return transport::Reply(json::object());
}

ptc::Result<transport::Reply> PeerService::dcp_files(const json& j) {
  PTC_ASSIGN_OR_RETURN(const DcpFilesRequest req, dcp_files_request_from_json(j));
  PTC_ASSIGN_OR_RETURN(auto files, saves_.staged_files(req.job, req.step));
  DcpFilesReply reply;
  reply.pending = files.has_value();
  if (files) reply.files = std::move(*files);
  return transport::Reply(to_json(reply));
}

ptc::Result<transport::Reply> PeerService::dcp_read(const json& j) {
  PTC_ASSIGN_OR_RETURN(const DcpReadRequest req, dcp_read_request_from_json(j));
  PTC_ASSIGN_OR_RETURN(std::string bytes, saves_.read_staged(req.job, req.step, req.file, req.off, req.n));
  auto buf = std::make_shared<const std::string>(std::move(bytes));
  transport::Reply reply(json{{"xxh3", xxh3_of(buf->data(), buf->size())}, {"n", buf->size()}});
  reply.payload.add(buf->data(), buf->size());
  reply.payload.keep.push_back(buf);
  return reply;
}

ptc::Result<transport::Reply> PeerService::dcp_convert(const json& j) {
  PTC_ASSIGN_OR_RETURN(const DcpConvertRequest req, dcp_convert_request_from_json(j));
  PTC_RETURN_IF_ERROR(saves_.convert_part(req).with_context("node " + id()));
  return transport::Reply(json::object());
}

ptc::Result<PreparedChange> PeerService::prepare_save(const SaveChange& c, PrepareReply& reply) {
  PTC_ASSIGN_OR_RETURN(ptc::Layout layout, ptc::Layout::make(c.ptc, c.ptc.parallelism));
  if (c.holders.size() != layout.shards().size())
    return ptc::invalid("peer.prepare: the holders do not match the layout of " + c.job + "/" + c.step);
  StepPlacement placement;
  placement.holders = c.holders;
  std::set<std::string> nodes;
  for (const auto& ids : c.holders) nodes.insert(ids.begin(), ids.end());
  placement.nodes.assign(nodes.begin(), nodes.end());
  for (const auto& ids : c.holders) placement.held.push_back(std::find(ids.begin(), ids.end(), id()) != ids.end());
  const bool wrote = saves_.progress(c.job, c.step).has_value();
  if (!wrote) {
    for (bool h : placement.held)
      if (h)
        return ptc::internal("node " + id() + " is named a holder of " + c.job + "/" + c.step + " but has no part");
    PreparedChange change(store_);
    PTC_RETURN_IF_ERROR(change.claim(store_, Claim::kNewStep, c.job, c.step));
    const size_t n = layout.shards().size();
    change.next = store_.new_version(c.job, c.step, 1, std::move(layout), std::vector<std::vector<StoredSlice>>(n),
                                     std::move(placement));
    return change;
  }
  PTC_ASSIGN_OR_RETURN(PreparedChange change, saves_.prepare_part(c.job, c.step, placement));
  // What the coordinator compares between replicas: the slices' checksums, per shard held.
  const auto& v = *change.next;
  for (size_t s = 0; s < v.layout().shards().size(); ++s) {
    if (!v.placement().holds(s)) continue;
    Xxh3Stream d;
    const auto& shard = v.layout().shards()[s];
    for (size_t j = 0; j < v.layout().slices(shard).size(); ++j) {
      const uint64_t h = v.stored(shard, j).xxh3.value_or(0);
      d.update(&h, sizeof h);
    }
    reply.shard_digests[shard.name()] = d.digest();
  }
  return change;
}

}  // namespace ptcfs
