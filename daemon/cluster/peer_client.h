// The peer operations a node sends (docs/FORMATS.md "Data frames and peer operations"), one
// typed call each (the records of daemon/cluster/change_record.h). A call to many nodes goes
// to all of them at once, on a fixed pool of threads owned by this object, and answers in
// the order of the nodes; this node's own part is answered in process by its PeerService,
// without the network. Every remote call has the backend's deadlines (transport/backend.h),
// so a stopped peer fails a call (kDeadlineExceeded or kUnavailable naming it) rather than
// hanging it.
//
// Thread-safety: every method may be called from any thread, but not from one of this
// object's own pool threads (a fan-out waits for them).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/cluster/changes/change_kinds.h"
#include "daemon/cluster/dcp_save_ops.h"
#include "daemon/cluster/two_phase.h"
#include "ptc/base/status.h"
#include "transport/backend.h"

namespace ptcfs {

class PeerService;

class PeerClient final : public ChangePeers {
 public:
  // `self` is this node's index in `peers`; `local` answers its own part. Both must outlive
  // this object. `threads`: the pool's size (the most peer calls under way at once).
  PeerClient(transport::PeerBackend& peers, int self, PeerService& local, unsigned threads = 16);
  ~PeerClient() override;  // waits for the calls under way
  PeerClient(const PeerClient&) = delete;
  PeerClient& operator=(const PeerClient&) = delete;

  std::shared_ptr<const ptc::ClusterConfig> cluster() const { return peers_.cluster(); }
  int self() const { return self_; }
  std::string name_of(int node) const override;

  std::vector<Result<StepState>> state(const std::vector<int>& nodes, const StateRequest& req);
  std::vector<Result<PrepareReply>> prepare(const std::vector<int>& nodes, const PrepareRequest& req) override;
  std::vector<Status> finish(const std::vector<int>& nodes, const FinishRequest& req) override;
  std::vector<Result<SaveState>> save_state(const std::vector<int>& nodes, const SaveStateRequest& req);
  Status save_ready(int node, const SaveReadyRequest& req);
  std::vector<Result<DatasetState>> dataset_state(const std::vector<int>& nodes, const DatasetStateRequest& req);
  std::vector<Result<PeerStats>> stats(const std::vector<int>& nodes);
  // A stock DCP save through several nodes' mounts (daemon/cluster/dcp_save_ops.h).
  std::vector<Result<DcpFilesReply>> dcp_files(const std::vector<int>& nodes, const DcpFilesRequest& req);
  Result<std::string> dcp_read(int node, const DcpReadRequest& req);
  std::vector<Status> dcp_convert(const std::vector<int>& nodes, const DcpConvertRequest& req);

 private:
  // `request` to every node of `nodes` at once; the answers, in order.
  std::vector<Result<nlohmann::json>> ask_all(const std::vector<int>& nodes, const nlohmann::json& request);
  Result<nlohmann::json> ask(int node, const nlohmann::json& request);
  // The outcome of `request` on each node of `nodes`, in order (a reply's content unused).
  std::vector<Status> ask_status(const std::vector<int>& nodes, const nlohmann::json& request);
  // Each reply of `ask_all(nodes, request)` decoded with `decode(reply, where)`.
  template <typename T, typename Decode>
  std::vector<Result<T>> ask_typed(const std::vector<int>& nodes, const nlohmann::json& request,
                                   const std::string& what, Decode decode);
  void run_pool();

  transport::PeerBackend& peers_;
  const int self_;
  PeerService& local_;
  std::mutex mu_;  // guards queue_, stopping_
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> pool_;
};

}  // namespace ptcfs
