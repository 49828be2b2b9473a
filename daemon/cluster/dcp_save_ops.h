// The peer operations of a stock DCP save written through several nodes' mounts
// (daemon/save/dcp_peers.h; docs/FORMATS.md "Data frames and peer operations"): each request
// and reply as a type, with its JSON codec in one place.
//
//   peer.dcp_files    {job, step} -> {"pending": bool, "files": {name: size}}: the .distcp files
//                     staged for job/step, sealed (the step takes no more files after it)
//   peer.dcp_read     {job, step, file, off, n} -> data frame: n bytes at off of a staged file
//   peer.dcp_convert  DcpConvertRequest -> {}: converts the node's part, answered when done
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/save/dcp_peers.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct DcpFilesRequest {
  std::string job, step;
};
struct DcpFilesReply {
  bool pending = false;  // the step is pending there
  std::map<std::string, uint64_t> files;
};
struct DcpReadRequest {
  std::string job, step, file;
  uint64_t off = 0, n = 0;
};

// The most bytes one peer.dcp_read answers (the transport's data reply limit).
inline constexpr uint64_t kMaxDcpRead = 32 << 20;
// The largest peer.dcp_convert request sent (a peer takes request frames up to 1 MiB).
inline constexpr size_t kMaxDcpConvertRequest = (1 << 20) - 4096;

nlohmann::json to_json(const DcpFilesRequest& r);
Result<DcpFilesRequest> dcp_files_request_from_json(const nlohmann::json& j);
nlohmann::json to_json(const DcpFilesReply& r);
Result<DcpFilesReply> dcp_files_reply_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json to_json(const DcpReadRequest& r);
Result<DcpReadRequest> dcp_read_request_from_json(const nlohmann::json& j);
nlohmann::json to_json(const DcpConvertRequest& r);
Result<DcpConvertRequest> dcp_convert_request_from_json(const nlohmann::json& j);

}  // namespace ptcfs
