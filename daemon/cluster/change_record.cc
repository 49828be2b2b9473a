#include "daemon/cluster/change_record.h"

#include "ptc/base/json_util.h"
#include "ptc/dataset.h"

namespace ptcfs {

using nlohmann::json;

Result<ptc::Ptc> ptc_member(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return invalid(where + " lacks the object '" + key + "'");
  return ptc::parse_ptc_json(it->dump(), where + " " + key);
}

json to_json(const PrepareReply& r) {
  return {{"shards", r.shards},
          {"bytes", r.bytes},
          {"ptc_digest", r.ptc_digest},
          {"tensors", r.tensors},
          {"bytes_received", r.bytes_received},
          {"shard_digests", r.shard_digests}};
}

Result<PrepareReply> prepare_reply_from_json(const json& j, const std::string& where) {
  PrepareReply r;
  PTC_ASSIGN_OR_RETURN(r.shards, member_u64_or(j, "shards", 0, where));
  PTC_ASSIGN_OR_RETURN(r.bytes, member_u64_or(j, "bytes", 0, where));
  PTC_ASSIGN_OR_RETURN(r.ptc_digest, member_u64_or(j, "ptc_digest", 0, where));
  PTC_ASSIGN_OR_RETURN(r.tensors, member_u64_or(j, "tensors", 0, where));
  PTC_ASSIGN_OR_RETURN(r.bytes_received, member_u64_or(j, "bytes_received", 0, where));
  if (auto it = j.find("shard_digests"); it != j.end()) {
    if (!it->is_object()) return invalid(where + " field 'shard_digests' must be an object");
    for (const auto& [shard, d] : it->items()) {
      if (!d.is_number_unsigned()) return invalid(where + " field 'shard_digests' holds a non-integer");
      r.shard_digests[shard] = d.get<uint64_t>();
    }
  }
  return r;
}

json to_json(const SaveState& s) {
  json j = {{"pending", s.pending}, {"ready", s.ready}, {"ptc_digest", s.ptc_digest}, {"complete", s.complete}};
  if (s.ptc) j["ptc"] = ptc_json(*s.ptc);
  return j;
}

Result<SaveState> save_state_from_json(const json& j, const std::string& where) {
  SaveState s;
  PTC_ASSIGN_OR_RETURN(s.pending, member_bool_or(j, "pending", false, where));
  PTC_ASSIGN_OR_RETURN(s.ready, member_bool_or(j, "ready", false, where));
  PTC_ASSIGN_OR_RETURN(s.ptc_digest, member_u64_or(j, "ptc_digest", 0, where));
  PTC_ASSIGN_OR_RETURN(s.complete, member_strings(j, "complete", where));
  if (j.contains("ptc")) {
    PTC_ASSIGN_OR_RETURN(ptc::Ptc p, ptc_member(j, "ptc", where));
    s.ptc = std::move(p);
  }
  return s;
}

json to_json(const StepState& s) {
  json j = {{"version", s.version}, {"nodes", s.nodes}, {"held", s.held}, {"ptc", ptc_json(s.ptc)}};
  if (!s.gpus.empty()) j["gpus"] = s.gpus;
  if (!s.holders.empty()) j["holders"] = s.holders;
  if (!s.origin.empty()) j["origin"] = s.origin;
  if (!s.copy_origin.empty()) j["copy_origin"] = s.copy_origin;
  return j;
}

Result<StepState> step_state_from_json(const json& j, const std::string& where) {
  StepState s;
  PTC_ASSIGN_OR_RETURN(s.version, member_u64(j, "version", where));
  PTC_ASSIGN_OR_RETURN(s.nodes, member_strings(j, "nodes", where));
  PTC_ASSIGN_OR_RETURN(s.gpus, member_gpus_or_empty(j, "gpus", where));
  PTC_ASSIGN_OR_RETURN(s.held, member_strings(j, "held", where));
  PTC_ASSIGN_OR_RETURN(s.ptc, ptc_member(j, "ptc", where));
  if (j.contains("holders")) {
    PTC_ASSIGN_OR_RETURN(s.holders, member_string_lists(j, "holders", where));
  }
  PTC_ASSIGN_OR_RETURN(s.origin, member_string_or(j, "origin", "", where));
  PTC_ASSIGN_OR_RETURN(s.copy_origin, member_string_or(j, "copy_origin", "", where));
  return s;
}

json to_json(const DatasetState& s) {
  return {{"version", s.version},
          {"dp", s.dp},
          {"epoch", s.epoch},
          {"consumed", s.consumed},
          {"table_xxh3", s.table_xxh3},
          {"global_batch", s.global_batch},
          {"batch_offset", s.batch_offset}};
}

Result<DatasetState> dataset_state_from_json(const json& j, const std::string& where) {
  DatasetState s;
  PTC_ASSIGN_OR_RETURN(s.version, member_u64(j, "version", where));
  PTC_ASSIGN_OR_RETURN(s.dp, member_u64(j, "dp", where));
  PTC_ASSIGN_OR_RETURN(s.epoch, member_u64(j, "epoch", where));
  PTC_ASSIGN_OR_RETURN(s.consumed, member_u64(j, "consumed", where));
  PTC_ASSIGN_OR_RETURN(s.table_xxh3, member_u64(j, "table_xxh3", where));
  PTC_ASSIGN_OR_RETURN(s.global_batch, member_u64_or(j, "global_batch", 0, where));
  PTC_ASSIGN_OR_RETURN(s.batch_offset, member_u64_or(j, "batch_offset", 0, where));
  return s;
}

json to_json(const PeerStats& s) { return {{"bytes_sent", s.bytes_sent}, {"bytes_received", s.bytes_received}}; }

Result<PeerStats> peer_stats_from_json(const json& j, const std::string& where) {
  PeerStats s;
  PTC_ASSIGN_OR_RETURN(s.bytes_sent, member_u64(j, "bytes_sent", where));
  PTC_ASSIGN_OR_RETURN(s.bytes_received, member_u64(j, "bytes_received", where));
  return s;
}

namespace {

// A request of `op` with two string members `a` and `b`, nothing else.
template <typename R>
Result<R> two_strings(const json& j, const char* op, const char* a, const char* b, std::string R::*ma,
                      std::string R::*mb) {
  const std::string w = std::string(op) + " request";
  PTC_RETURN_IF_ERROR(check_members(j, {"op", a, b}, w));
  R r;
  PTC_ASSIGN_OR_RETURN(r.*ma, member_string(j, a, w));
  PTC_ASSIGN_OR_RETURN(r.*mb, member_string(j, b, w));
  return r;
}

}  // namespace

json to_json(const StateRequest& r) { return {{"op", "peer.state"}, {"job", r.job}, {"step", r.step}}; }

Result<StateRequest> state_request_from_json(const json& j) {
  return two_strings(j, "peer.state", "job", "step", &StateRequest::job, &StateRequest::step);
}

json to_json(const FinishRequest& r) {
  json j = {{"op", r.commit ? "peer.commit" : "peer.abort"}, {"tx", r.tx}};
  if (!r.why.empty()) j["why"] = r.why;
  return j;
}

Result<FinishRequest> finish_request_from_json(const json& j, bool commit) {
  const std::string w = commit ? "peer.commit" : "peer.abort";
  PTC_RETURN_IF_ERROR(check_members(j, {"op", "tx", "why"}, w + " request"));
  FinishRequest r;
  r.commit = commit;
  PTC_ASSIGN_OR_RETURN(r.tx, member_string(j, "tx", w));
  if (j.contains("why")) {
    PTC_ASSIGN_OR_RETURN(r.why, member_string(j, "why", w));
  }
  return r;
}

json to_json(const SaveStateRequest& r) { return {{"op", "peer.save_state"}, {"job", r.job}, {"step", r.step}}; }

Result<SaveStateRequest> save_state_request_from_json(const json& j) {
  return two_strings(j, "peer.save_state", "job", "step", &SaveStateRequest::job, &SaveStateRequest::step);
}

json to_json(const SaveReadyRequest& r) { return {{"op", "peer.save_ready"}, {"job", r.job}, {"step", r.step}}; }

Result<SaveReadyRequest> save_ready_request_from_json(const json& j) {
  return two_strings(j, "peer.save_ready", "job", "step", &SaveReadyRequest::job, &SaveReadyRequest::step);
}

json to_json(const DatasetStateRequest& r) { return {{"op", "peer.dataset_state"}, {"job", r.job}, {"name", r.name}}; }

Result<DatasetStateRequest> dataset_state_request_from_json(const json& j) {
  return two_strings(j, "peer.dataset_state", "job", "name", &DatasetStateRequest::job, &DatasetStateRequest::name);
}

json to_json(const StatsRequest&) { return {{"op", "peer.stats"}}; }

Result<StatsRequest> stats_request_from_json(const json& j) {
  PTC_RETURN_IF_ERROR(check_members(j, {"op"}, "peer.stats request"));
  return StatsRequest{};
}

json to_json(const DatasetTableRequest& r) {
  return {{"op", "peer.dataset_table"}, {"tx", r.tx}, {"off", r.off}, {"n", r.n}};
}

Result<DatasetTableRequest> dataset_table_request_from_json(const json& j) {
  const std::string w = "peer.dataset_table";
  PTC_RETURN_IF_ERROR(check_members(j, {"op", "tx", "off", "n"}, w + " request"));
  DatasetTableRequest r;
  PTC_ASSIGN_OR_RETURN(r.tx, member_string(j, "tx", w));
  PTC_ASSIGN_OR_RETURN(r.off, member_u64(j, "off", w));
  PTC_ASSIGN_OR_RETURN(r.n, member_u64(j, "n", w));
  return r;
}

json to_json(const SamplesRequest& r) {
  json pieces = json::array();
  for (const auto& p : r.pieces) pieces.push_back({p.sample, p.off, p.len});
  return {
      {"op", "peer.samples"},       {"from", r.from}, {"job", r.job}, {"name", r.name}, {"table_xxh3", r.table_xxh3},
      {"pieces", std::move(pieces)}};
}

Result<SamplesRequest> samples_request_from_json(const json& j) {
  const std::string w = "peer.samples";
  PTC_RETURN_IF_ERROR(check_members(j, {"op", "from", "job", "name", "table_xxh3", "pieces"}, w + " request"));
  SamplesRequest r;
  PTC_ASSIGN_OR_RETURN(r.from, member_string_or(j, "from", "", w));
  PTC_ASSIGN_OR_RETURN(r.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(r.name, member_string(j, "name", w));
  PTC_ASSIGN_OR_RETURN(r.table_xxh3, member_u64(j, "table_xxh3", w));
  auto it = j.find("pieces");
  if (it == j.end() || !it->is_array()) return invalid(w + " 'pieces' must be a list");
  for (const auto& p : *it) {
    if (!p.is_array() || p.size() != 3 || !p[0].is_number_unsigned() || !p[1].is_number_unsigned() ||
        !p[2].is_number_unsigned())
      return invalid("peer.samples: a piece is not [sample, offset, length]");
    r.pieces.push_back({p[0].get<uint64_t>(), p[1].get<uint64_t>(), p[2].get<uint64_t>()});
  }
  return r;
}

json to_json(const ReadRequest& r) {
  json j = {{"op", "peer.read"}, {"from", r.from},     {"job", r.job}, {"step", r.step}, {"version", r.version},
            {"shard", r.shard},  {"tensor", r.tensor}, {"lo", r.lo},   {"len", r.len},   {"off", r.off},
            {"n", r.n}};
  if (r.hold) j["hold"] = true;
  return j;
}

Result<ReadRequest> read_request_from_json(const json& j) {
  const std::string w = "peer.read";
  PTC_RETURN_IF_ERROR(check_members(
      j, {"op", "from", "job", "step", "version", "shard", "tensor", "lo", "len", "off", "n", "hold"}, w + " request"));
  ReadRequest r;
  PTC_ASSIGN_OR_RETURN(r.from, member_string_or(j, "from", "", w));
  PTC_ASSIGN_OR_RETURN(r.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(r.step, member_string(j, "step", w));
  PTC_ASSIGN_OR_RETURN(r.shard, member_string(j, "shard", w));
  PTC_ASSIGN_OR_RETURN(r.tensor, member_string(j, "tensor", w));
  PTC_ASSIGN_OR_RETURN(r.version, member_u64(j, "version", w));
  PTC_ASSIGN_OR_RETURN(r.lo, member_u64(j, "lo", w));
  PTC_ASSIGN_OR_RETURN(r.len, member_u64(j, "len", w));
  PTC_ASSIGN_OR_RETURN(r.off, member_u64(j, "off", w));
  PTC_ASSIGN_OR_RETURN(r.n, member_u64(j, "n", w));
  if (j.contains("hold")) {
    if (!j["hold"].is_boolean()) return invalid(w + " request: 'hold' must be true or false");
    r.hold = j["hold"].get<bool>();
  }
  return r;
}

}  // namespace ptcfs
