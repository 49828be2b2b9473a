// What the mount needs of the cluster: the bytes of slices and samples this node does not
// hold, read from a peer that does (docs/ARCHITECTURE.md "A
// cluster"). A slice read is a peer.read to a node holding the shard, verified by
// XXH3, trying the replicas in turn; which nodes hold each shard is computed once per step
// version, not per read. A sample read is a peer.samples to the dataset's home node. Every
// call has the backend's deadlines: a peer that stops answering fails the read (EIO at the
// mount) and the log names it.
//
// Thread-safety: all methods may be called concurrently (FUSE workers).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/store/dataset_version.h"
#include "daemon/store/step_version.h"
#include "transport/backend.h"

namespace ptcfs {

class PeerReader final : public RemoteSlices, public RemoteSamples {
 public:
  // `peers` must outlive this object; `self` is this node's index in peers.cluster().
  PeerReader(transport::PeerBackend& peers, int self)
      : peers_(peers), self_(self), self_id_(peers.cluster()->nodes.at(static_cast<size_t>(self)).id) {}

  Status read(const StepVersion& v, const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
              fs::ReadBuffer& out) const override;
  const std::string& self_id() const override;
  using Holders = std::vector<std::vector<int>>;  // per shard of the version's layout: node indices
  // The nodes holding each shard of `v`, in the cluster table's order (the write-through tier's
  // first holders, daemon/durable/durable_plan.h).
  Result<std::shared_ptr<const Holders>> holders(const StepVersion& v) const;
  Status read_samples(const DatasetVersion& v, const std::vector<fs::DatasetContent::Piece>& pieces,
                      fs::ReadBuffer& out) const override;

 private:
  transport::PeerBackend& peers_;
  int self_;
  std::string self_id_;
  mutable std::atomic<uint64_t> reads_{0};  // spreads readers over replicas
  mutable std::mutex mu_;                   // guards holders_, silent_
  // A node whose read just timed out: when, and how. The kernel retries a failed read at once
  // (a smaller piece of the same page range); that retry fails at once too, so that a read
  // through the mount fails within --peer-timeout, not twice it.
  struct Silent {
    std::chrono::steady_clock::time_point at;
    Status why;
  };
  mutable std::map<int, Silent> silent_;
  mutable std::map<uint64_t, std::shared_ptr<const Holders>> holders_;  // by StepVersion::serial
};

}  // namespace ptcfs
