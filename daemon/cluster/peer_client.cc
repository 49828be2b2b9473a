#include "daemon/cluster/peer_client.h"

#include <future>

#include "daemon/cluster/nodes.h"
#include "daemon/cluster/peer_service.h"
#include "daemon/store/checksum.h"

namespace ptcfs {

using nlohmann::json;

PeerClient::PeerClient(transport::PeerBackend& peers, int self, PeerService& local, unsigned threads)
    : peers_(peers), self_(self), local_(local) {
  for (unsigned i = 0; i < std::max(threads, 1u); ++i) pool_.emplace_back([this] { run_pool(); });
}

PeerClient::~PeerClient() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : pool_) t.join();
}

void PeerClient::run_pool() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to do
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

std::string PeerClient::name_of(int node) const { return node_id(*peers_.cluster(), node); }

Result<json> PeerClient::ask(int node, const json& request) {
  if (node != self_) return peers_.call(node, request);
  auto r = local_.handle(request);
  return r ? Result<json>(std::move(r->result)) : Result<json>(r.status());
}

std::vector<Result<json>> PeerClient::ask_all(const std::vector<int>& nodes, const json& request) {
  std::vector<Result<json>> out(nodes.size(), internal("not asked"));
  if (nodes.size() == 1) {  // no fan-out to make
    out[0] = ask(nodes[0], request);
    return out;
  }
  std::mutex done_mu;
  std::condition_variable done_cv;
  size_t left = nodes.size();
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < nodes.size(); ++i)
      queue_.emplace_back([&, i] {
        auto r = ask(nodes[i], request);
        std::lock_guard done(done_mu);
        out[i] = std::move(r);
        if (--left == 0) done_cv.notify_all();
      });
  }
  cv_.notify_all();
  std::unique_lock lock(done_mu);
  done_cv.wait(lock, [&] { return left == 0; });
  return out;
}

template <typename T, typename Decode>
std::vector<Result<T>> PeerClient::ask_typed(const std::vector<int>& nodes, const json& request,
                                             const std::string& what, Decode decode) {
  auto answers = ask_all(nodes, request);
  std::vector<Result<T>> out;
  out.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    out.push_back(answers[i] ? decode(*answers[i], what + " of node " + name_of(nodes[i]))
                             : Result<T>(answers[i].status()));
  return out;
}

std::vector<Result<StepState>> PeerClient::state(const std::vector<int>& nodes, const StateRequest& req) {
  return ask_typed<StepState>(nodes, to_json(req), "state of " + req.job + "/" + req.step, step_state_from_json);
}

std::vector<Result<PrepareReply>> PeerClient::prepare(const std::vector<int>& nodes, const PrepareRequest& req) {
  return ask_typed<PrepareReply>(nodes, to_json(req), "prepare reply", prepare_reply_from_json);
}

std::vector<Status> PeerClient::ask_status(const std::vector<int>& nodes, const json& request) {
  auto answers = ask_all(nodes, request);
  std::vector<Status> out;
  out.reserve(nodes.size());
  for (auto& a : answers) out.push_back(a.status());
  return out;
}

std::vector<Status> PeerClient::finish(const std::vector<int>& nodes, const FinishRequest& req) {
  return ask_status(nodes, to_json(req));
}

std::vector<Result<SaveState>> PeerClient::save_state(const std::vector<int>& nodes, const SaveStateRequest& req) {
  return ask_typed<SaveState>(nodes, to_json(req), "save state", save_state_from_json);
}

Status PeerClient::save_ready(int node, const SaveReadyRequest& req) { return ask(node, to_json(req)).status(); }

std::vector<Result<DatasetState>> PeerClient::dataset_state(const std::vector<int>& nodes,
                                                            const DatasetStateRequest& req) {
  return ask_typed<DatasetState>(nodes, to_json(req), "state of dataset " + req.job + "/" + req.name,
                                 dataset_state_from_json);
}

std::vector<Result<PeerStats>> PeerClient::stats(const std::vector<int>& nodes) {
  return ask_typed<PeerStats>(nodes, to_json(StatsRequest{}), "stats", peer_stats_from_json);
}

std::vector<Result<DcpFilesReply>> PeerClient::dcp_files(const std::vector<int>& nodes, const DcpFilesRequest& req) {
  return ask_typed<DcpFilesReply>(nodes, to_json(req), "staged files of " + req.job + "/" + req.step,
                                  dcp_files_reply_from_json);
}

Result<std::string> PeerClient::dcp_read(int node, const DcpReadRequest& req) {
  std::string out;
  json head;
  if (node == self_) {
    PTC_ASSIGN_OR_RETURN(transport::Reply r, local_.handle(to_json(req)));
    for (const auto& [p, n] : r.payload.spans) out.append(static_cast<const char*>(p), n);
    head = std::move(r.result);
  } else {
    PTC_ASSIGN_OR_RETURN(head, peers_.call_data(node, to_json(req), out, req.n));
  }
  const std::string what = req.job + "/" + req.step + "/" + req.file + " from node " + name_of(node);
  if (out.size() != req.n)
    return io_error(what + ": " + std::to_string(out.size()) + " bytes, not " + std::to_string(req.n), EIO);
  if (!head.is_object() || !head.contains("xxh3") || !head.at("xxh3").is_number_unsigned() ||
      head.at("xxh3").get<uint64_t>() != xxh3_of(out.data(), out.size()))
    return io_error(what + ": the bytes do not match their checksum (changed on the way)", EIO);
  return out;
}

std::vector<Status> PeerClient::dcp_convert(const std::vector<int>& nodes, const DcpConvertRequest& req) {
  // A conversion runs for as long as its node copies its shards: on threads of its own, not the
  // pool's, which every other fan-out of this node shares.
  const json request = to_json(req);
  std::vector<std::future<Status>> calls;
  calls.reserve(nodes.size());
  for (int node : nodes)
    calls.push_back(std::async(std::launch::async, [&, node] { return ask(node, request).status(); }));
  std::vector<Status> out;
  out.reserve(nodes.size());
  for (auto& c : calls) out.push_back(c.get());
  return out;
}

}  // namespace ptcfs
