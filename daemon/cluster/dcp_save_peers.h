// The cluster's side of a stock DCP save written through several nodes' mounts: the
// DcpPeers the save service uses (daemon/save/dcp_peers.h), over the peer operations of
// daemon/cluster/dcp_save_ops.h, to the live members (daemon/cluster/membership.h).
//
// Thread-safety: every method may be called from any thread but PeerClient's own pool threads.
#pragma once

#include "daemon/cluster/membership.h"
#include "daemon/cluster/peer_client.h"
#include "daemon/save/dcp_peers.h"

namespace ptcfs {

class DcpSavePeers final : public DcpPeers {
 public:
  // Both must outlive this object.
  DcpSavePeers(PeerClient& peers, Membership& members) : peers_(peers), members_(members) {}

  std::string self() const override;
  Result<std::map<std::string, std::map<std::string, uint64_t>>> staged_files(const std::string& job,
                                                                              const std::string& step) override;
  Result<std::string> read(const std::string& node, const std::string& job, const std::string& step,
                           const std::string& file, uint64_t off, uint64_t len) override;
  std::vector<Status> convert(const std::vector<std::string>& nodes, const DcpConvertRequest& req) override;
  Status wait_committed(const std::vector<std::string>& nodes, const std::string& job, const std::string& step,
                        std::chrono::milliseconds timeout) override;

 private:
  Result<int> index_of(const std::string& node) const;
  Result<std::vector<int>> indices_of(const std::vector<std::string>& nodes) const;

  PeerClient& peers_;
  Membership& members_;
};

}  // namespace ptcfs
