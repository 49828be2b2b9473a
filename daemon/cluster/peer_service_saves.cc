// The save half of the peer service (daemon/cluster/peer_service.h): a node reports its part
// of a step being saved into its mount (peer.save_state; its prepare is the kind "save",
// daemon/cluster/changes/save_change.h), and, for a stock DCP save whose ranks wrote through
// several nodes' mounts, its staged files and its part's conversion (daemon/cluster/dcp_save_ops.h).
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

Result<transport::Reply> PeerService::save_state(const json& j) {
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

Result<transport::Reply> PeerService::save_ready(const json& j) {
  PTC_ASSIGN_OR_RETURN(const SaveReadyRequest req, save_ready_request_from_json(j));
  saves_.note_ready(req.job, req.step);  // the node's ticker asks for the commit (ChangeRunner::save_commit)
  return transport::Reply(json::object());
}

Result<transport::Reply> PeerService::dcp_files(const json& j) {
  PTC_ASSIGN_OR_RETURN(const DcpFilesRequest req, dcp_files_request_from_json(j));
  PTC_ASSIGN_OR_RETURN(auto files, saves_.staged_files(req.job, req.step));
  DcpFilesReply reply;
  reply.pending = files.has_value();
  if (files) reply.files = std::move(*files);
  return transport::Reply(to_json(reply));
}

Result<transport::Reply> PeerService::dcp_read(const json& j) {
  PTC_ASSIGN_OR_RETURN(const DcpReadRequest req, dcp_read_request_from_json(j));
  PTC_ASSIGN_OR_RETURN(std::string bytes, saves_.read_staged(req.job, req.step, req.file, req.off, req.n));
  auto buf = std::make_shared<const std::string>(std::move(bytes));
  transport::Reply reply(json{{"xxh3", xxh3_of(buf->data(), buf->size())}, {"n", buf->size()}});
  reply.payload.add(buf->data(), buf->size());
  reply.payload.keep.push_back(buf);
  return reply;
}

Result<transport::Reply> PeerService::dcp_convert(const json& j) {
  PTC_ASSIGN_OR_RETURN(const DcpConvertRequest req, dcp_convert_request_from_json(j));
  PTC_RETURN_IF_ERROR(saves_.convert_part(req).with_context("node " + id()));
  return transport::Reply(json::object());
}

}  // namespace ptcfs
