#include "daemon/cluster/dcp_save_peers.h"

#include <algorithm>
#include <optional>
#include <thread>

namespace ptcfs {

std::string DcpSavePeers::self() const { return peers_.name_of(peers_.self()); }

Result<int> DcpSavePeers::index_of(const std::string& node) const {
  const auto table = peers_.cluster();
  for (size_t i = 0; i < table->nodes.size(); ++i)
    if (table->nodes[i].id == node) return static_cast<int>(i);
  return not_found("no node " + node + " in the cluster");
}

Result<std::vector<int>> DcpSavePeers::indices_of(const std::vector<std::string>& nodes) const {
  std::vector<int> out;
  for (const auto& n : nodes) {
    PTC_ASSIGN_OR_RETURN(int i, index_of(n));
    out.push_back(i);
  }
  return out;
}

Result<std::map<std::string, std::map<std::string, uint64_t>>> DcpSavePeers::staged_files(const std::string& job,
                                                                                          const std::string& step) {
  std::vector<int> others;
  for (int n : members_.members())
    if (n != peers_.self()) others.push_back(n);
  std::map<std::string, std::map<std::string, uint64_t>> out;
  if (others.empty()) return out;
  const auto answers = peers_.dcp_files(others, DcpFilesRequest{job, step});
  std::optional<Status> failed;
  for (size_t i = 0; i < others.size(); ++i) {
    if (!answers[i]) {
      if (!failed)
        failed = answers[i].status().with_context("asking node " + peers_.name_of(others[i]) + " for its files of " +
                                                  job + "/" + step + " (its ranks may have written some)");
      continue;
    }
    if (answers[i]->pending) out[peers_.name_of(others[i])] = answers[i]->files;
  }
  if (!failed) return out;
  // Those that answered sealed their files for a conversion that will not come: their parts fail
  // too, saying why, rather than wait pending with no reason.
  DcpConvertRequest notice;
  notice.job = job;
  notice.step = step;
  notice.from = self();
  notice.failed = failed->message();
  std::vector<std::string> sealed;
  for (const auto& [node, files] : out) sealed.push_back(node);
  if (!sealed.empty()) convert(sealed, notice);
  return *failed;
}

Result<std::string> DcpSavePeers::read(const std::string& node, const std::string& job, const std::string& step,
                                       const std::string& file, uint64_t off, uint64_t len) {
  PTC_ASSIGN_OR_RETURN(int i, index_of(node));
  std::string out;
  out.reserve(len);
  for (uint64_t done = 0; done < len;) {
    const uint64_t n = std::min(kMaxDcpRead, len - done);
    PTC_ASSIGN_OR_RETURN(std::string piece, peers_.dcp_read(i, DcpReadRequest{job, step, file, off + done, n}));
    out += piece;
    done += n;
  }
  return out;
}

std::vector<Status> DcpSavePeers::convert(const std::vector<std::string>& nodes, const DcpConvertRequest& req) {
  auto idx = indices_of(nodes);
  if (!idx) return std::vector<Status>(nodes.size(), idx.status());
  // One request names every file's node: past the peers' request limit, say so (about 20,000
  // files; torch writes thread_count files a rank).
  if (const size_t n = to_json(req).dump().size(); n > kMaxDcpConvertRequest)
    return std::vector<Status>(nodes.size(),
                               error(Code::kResourceExhausted,
                                     req.job + "/" + req.step + ": the conversion request naming its " +
                                         std::to_string(req.files.size()) + " files is " + std::to_string(n) +
                                         " bytes, over the peers' 1 MiB request limit (save with fewer files a rank)"));
  return peers_.dcp_convert(*idx, req);
}

Status DcpSavePeers::wait_committed(const std::vector<std::string>& nodes, const std::string& job,
                                    const std::string& step, std::chrono::milliseconds timeout) {
  PTC_ASSIGN_OR_RETURN(std::vector<int> left, indices_of(nodes));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    const auto answers = peers_.state(left, StateRequest{job, step});
    std::vector<int> still;
    for (size_t i = 0; i < left.size(); ++i)
      if (!answers[i] || answers[i]->version == 0) still.push_back(left[i]);
    if (still.empty()) return Status::ok();
    if (std::chrono::steady_clock::now() > deadline)
      return error(Code::kDeadlineExceeded,
                   job + "/" + step + " is committed here but not yet on node " + peers_.name_of(still.front()));
    left = std::move(still);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace ptcfs
