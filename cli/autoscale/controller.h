// The autoscaler's controller (docs/PLANNER.md "The autoscaler"), a library the CLI's
// `ptcfs autoscale` (cli/autoscale_cmd.h) runs and unit tests reach: one controller at a time
// holds <prefix>/leader under a lease (kept by transport/etcd_lease.h); on every change of the
// queue or of the capacity it decides again and carries out each changed decision: the job's
// latest step repartitioned through its daemon, then <prefix>/decision/<job> written, fenced
// by the leader key's lease, for the job's launcher to watch.
//
// What differs between callers comes in as functions: the policy (decide), how a daemon is
// reached (call), where --json lines go (print). Thread-safety: one thread runs a controller;
// it starts threads of its own (the lease keeper, one per repartition carried out at once).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"
#include "ptc/planner/autoscale.h"
#include "transport/etcd_client.h"
#include "transport/etcd_lease.h"

namespace ptcfs::cli {

struct ControllerOptions {
  std::string prefix = "/ptcfs-autoscale";  // of the queue, capacity, decisions and leader
  std::string id;                           // in <prefix>/leader and in each decision
  std::string policy = "throughput";        // its name, for the log
  int gpus = 0;                             // the capacity when <prefix>/capacity is absent
  int lease_ttl_s = 5;
  double retry_s = 5;  // a pass that failed somewhere is tried again after this long
};

// A queue entry that does not parse: its job keeps its stored decision and the GPUs in it.
struct Unreadable {
  std::string key, error;
  bool stored = false;  // it has a stored decision
  int reserved = 0;     // the GPUs of that decision (0: none stored, or queued)
};

// What one pass reads of <prefix>/.
struct Snapshot {
  std::vector<planner::QueueEntry> queue;                 // in submit order
  std::map<std::string, Unreadable> unreadable;           // by job, left out of the pass
  std::map<std::string, planner::StoredDecision> stored;  // of the readable entries and of finished jobs
  std::vector<std::string> unreadable_decisions;          // jobs whose stored decision does not parse
  int gpus = 0;                                           // the capacity
  int reserved = 0;                                       // of it, held by the jobs whose entries are unreadable
  int free() const;
  std::map<std::string, planner::Decision> decisions() const;  // the stored ones, by job
  int64_t revision = 0;
};

class Controller {
 public:
  // The policy: every queued job's decision on `gpus` free GPUs, given the stored decisions.
  using Decide = std::function<Result<std::vector<planner::Decision>>(
      const std::vector<planner::QueueEntry>& queue, int gpus, const std::map<std::string, planner::Decision>& stored)>;
  // One request to the daemon at `daemon` (the CLI's client, cli/client.h).
  using Call = std::function<Result<nlohmann::json>(const std::string& daemon, const nlohmann::json& req)>;
  // A --json line: each decision written, each unreadable queue entry (may be empty).
  using Print = std::function<void(const std::string& line)>;

  Controller(ControllerOptions options, std::unique_ptr<transport::EtcdClient> etcd, Decide decide, Call call,
             Print print = {});
  ~Controller();

  // Campaigns once and, when it leads, makes one pass and gives the lead up. Whether the pass
  // carried out everything; kUnavailable naming the holder when another controller leads, or
  // when the lead was lost during the pass (what was left of it not done).
  Result<bool> once();
  // Campaigns, leads (a pass on each change, again after retry_s while one failed somewhere)
  // and, having lost the lead, campaigns again; or stands by while another leads. Until
  // stop() is called from another thread (or forever).
  void serve();
  void stop() { stopping_ = true; }

 private:
  std::string key(const std::string& rest) const { return o_.prefix + "/" + rest; }
  Result<bool> campaign();
  void wait_for_vacancy();
  void lead();
  // One pass: decide and carry out what changed. Whether everything was carried out.
  bool pass(int64_t* revision);
  Result<Snapshot> read();
  void report(const Snapshot& s);
  Status carry_out(const planner::QueueEntry& e, const planner::Decision& d, std::string* step);
  bool record(const planner::Decision& d, Status s, const std::string& step);
  Status fenced(const std::vector<transport::EtcdWrite>& writes);
  Status still_leading();
  void keep_lease();  // lost_ when the lease is lost, which stops the pass
  void drop_lease();

  const ControllerOptions o_;
  std::unique_ptr<transport::EtcdClient> etcd_;
  const Decide decide_;
  const Call call_;
  const Print print_;
  int64_t lease_ = 0;
  int64_t seq_ = 0;
  std::atomic<bool> lost_{false};
  std::atomic<bool> stopping_{false};
  std::unique_ptr<transport::LeaseKeeper> keeper_;
};

}  // namespace ptcfs::cli
