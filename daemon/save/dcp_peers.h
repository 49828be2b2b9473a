// A stock PyTorch DCP save whose ranks write through several nodes' mounts (docs/FORMATS.md
// "Stock dcp.save into the mount"): each node stages the .distcp files its own ranks write; the
// node that gets the .metadata rename asks the others for theirs, decides which node holds each
// shard of the step (the one whose ranks wrote the most of its bytes), and has every node convert
// its shards, reading the pieces it lacks from the other nodes' staged files. What the save
// service needs of the cluster for that is this interface (daemon/cluster/dcp_save_peers.h
// implements it over the peer protocol), so that daemon/save knows no transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs {

// What every node converts: the checkpoint's .metadata (read from node `from`), where each
// .distcp file lies, and per shard of the derived layout (tp index) the node that holds it.
struct DcpConvertRequest {
  std::string job, step;
  std::string from;                          // the node whose mount got the .metadata
  uint64_t metadata_size = 0;                // bytes of .metadata.tmp there
  std::map<std::string, std::string> files;  // .distcp file -> the node that staged it
  std::vector<std::string> shards;           // shard t -> its holder
  // Not empty: the save failed on node `from` (why); the node records it on its part (which
  // then never says it is ready) instead of converting.
  std::string failed;
};

// The most bytes of .metadata a conversion reads (as a staged .metadata.tmp holds at most).
inline constexpr uint64_t kMaxDcpMetadata = uint64_t{64} << 20;

class DcpPeers {
 public:
  virtual ~DcpPeers() = default;
  virtual std::string self() const = 0;
  // Every other live member's staged files of job/step (name -> size; sealed by the asking, so
  // none changes afterwards), by node. Fails when a member does not answer: its files might be
  // the ones the save needs (the nodes that did answer are then told the save failed).
  virtual Result<std::map<std::string, std::map<std::string, uint64_t>>> staged_files(const std::string& job,
                                                                                      const std::string& step) = 0;
  // `len` bytes at `off` of file `file` staged on `node` (any length: read in pieces).
  virtual Result<std::string> read(const std::string& node, const std::string& job, const std::string& step,
                                   const std::string& file, uint64_t off, uint64_t len) = 0;
  // Has each of `nodes` convert its part (all at once); their outcomes, in order.
  virtual std::vector<Status> convert(const std::vector<std::string>& nodes, const DcpConvertRequest& req) = 0;
  // Until every node of `nodes` serves job/step committed, at most `timeout`.
  virtual Status wait_committed(const std::vector<std::string>& nodes, const std::string& job, const std::string& step,
                                std::chrono::milliseconds timeout) = 0;
};

}  // namespace ptcfs
