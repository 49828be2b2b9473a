#include "daemon/cluster/dcp_save_ops.h"

#include "ptc/base/json_util.h"

namespace ptcfs {

using nlohmann::json;

namespace {

Result<std::map<std::string, uint64_t>> sizes_of(const json& j, const std::string& where) {
  if (!j.is_object()) return invalid(where + ": 'files' must be an object");
  std::map<std::string, uint64_t> out;
  for (const auto& [name, v] : j.items()) {
    PTC_ASSIGN_OR_RETURN(int64_t n, get_int(v, where + ": size of " + name, 0));
    out[name] = static_cast<uint64_t>(n);
  }
  return out;
}

}  // namespace

json to_json(const DcpFilesRequest& r) { return {{"op", "peer.dcp_files"}, {"job", r.job}, {"step", r.step}}; }

Result<DcpFilesRequest> dcp_files_request_from_json(const json& j) {
  const std::string w = "peer.dcp_files request";
  PTC_RETURN_IF_ERROR(check_members(j, {"op", "job", "step"}, w));
  DcpFilesRequest r;
  PTC_ASSIGN_OR_RETURN(r.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(r.step, member_string(j, "step", w));
  return r;
}

json to_json(const DcpFilesReply& r) { return {{"pending", r.pending}, {"files", r.files}}; }

Result<DcpFilesReply> dcp_files_reply_from_json(const json& j, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_members(j, {"pending", "files"}, where));
  DcpFilesReply r;
  PTC_ASSIGN_OR_RETURN(r.pending, member_bool_or(j, "pending", false, where));
  if (j.contains("files")) {
    PTC_ASSIGN_OR_RETURN(r.files, sizes_of(j.at("files"), where));
  }
  return r;
}

json to_json(const DcpReadRequest& r) {
  return {{"op", "peer.dcp_read"}, {"job", r.job}, {"step", r.step}, {"file", r.file}, {"off", r.off}, {"n", r.n}};
}

Result<DcpReadRequest> dcp_read_request_from_json(const json& j) {
  const std::string w = "peer.dcp_read request";
  PTC_RETURN_IF_ERROR(check_members(j, {"op", "job", "step", "file", "off", "n"}, w));
  DcpReadRequest r;
  PTC_ASSIGN_OR_RETURN(r.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(r.step, member_string(j, "step", w));
  PTC_ASSIGN_OR_RETURN(r.file, member_string(j, "file", w));
  PTC_ASSIGN_OR_RETURN(r.off, member_u64(j, "off", w));
  PTC_ASSIGN_OR_RETURN(r.n, member_u64(j, "n", w));
  if (r.n > kMaxDcpRead)
    return error(Code::kResourceExhausted,
                 w + ": n " + std::to_string(r.n) + " is over " + std::to_string(kMaxDcpRead) + " bytes");
  return r;
}

json to_json(const DcpConvertRequest& r) {
  json j = {{"op", "peer.dcp_convert"},         {"job", r.job},     {"step", r.step},    {"from", r.from},
            {"metadata_size", r.metadata_size}, {"files", r.files}, {"shards", r.shards}};
  if (!r.failed.empty()) j["failed"] = r.failed;
  return j;
}

Result<DcpConvertRequest> dcp_convert_request_from_json(const json& j) {
  const std::string w = "peer.dcp_convert request";
  PTC_RETURN_IF_ERROR(check_members(j, {"op", "job", "step", "from", "metadata_size", "files", "shards", "failed"}, w));
  DcpConvertRequest r;
  PTC_ASSIGN_OR_RETURN(r.job, member_string(j, "job", w));
  PTC_ASSIGN_OR_RETURN(r.step, member_string(j, "step", w));
  PTC_ASSIGN_OR_RETURN(r.from, member_string(j, "from", w));
  PTC_ASSIGN_OR_RETURN(r.metadata_size, member_u64(j, "metadata_size", w));
  if (r.metadata_size > kMaxDcpMetadata)
    return invalid(w + ": metadata_size " + std::to_string(r.metadata_size) + " is over " +
                   std::to_string(kMaxDcpMetadata) + " bytes");
  PTC_ASSIGN_OR_RETURN(r.failed, member_string_or(j, "failed", "", w));
  if (!j.contains("files") || !j.at("files").is_object()) return invalid(w + ": 'files' must be an object");
  for (const auto& [file, node] : j.at("files").items()) {
    PTC_ASSIGN_OR_RETURN(r.files[file], get_string(node, w + ": node of " + file));
  }
  PTC_ASSIGN_OR_RETURN(r.shards, member_strings(j, "shards", w));
  return r;
}

}  // namespace ptcfs
