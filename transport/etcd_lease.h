// An etcd lease kept alive from a thread of its own, for every holder of one: a node's
// registration (daemon/cluster/etcd_membership.h) and the autoscaler's lead
// (cli/autoscale/controller.h). It renews every TTL/3 (at least every 200 ms). The lease counts
// as lost when no renewal went through for half its TTL, since etcd may expire it any moment
// then and another holder take its place (docs/ARCHITECTURE.md "What holds under faults"), or
// at once when etcd says it expired and the holder cannot replace it.
//
// Thread-safety: the hooks run on the keeper's thread; stop() (or the destructor) may be
// called from any other thread and returns once that thread has ended.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "ptc/base/status.h"
#include "transport/etcd_client.h"

namespace ptcfs::transport {

class LeaseKeeper {
 public:
  struct Hooks {
    std::function<int64_t()> lease;  // the lease to renew now
    // etcd said the lease expired: ok once the holder took a new one (which lease() returns from
    // then on), else why it could not. Empty: an expired lease is lost at once.
    std::function<Status()> expired;
    std::function<void()> renewed;  // a renewal went through (may be empty)
    // The lease is lost (`why`: the last renewal's error), reported once until a renewal goes
    // through again: whether to go on renewing (a node fenced until etcd answers) or to stop (a
    // controller that lost the lead).
    std::function<bool(const Status& why)> lost;
  };

  // Starts renewing. `etcd` must outlive this object.
  LeaseKeeper(EtcdClient& etcd, int64_t ttl_s, Hooks hooks);
  ~LeaseKeeper() { stop(); }
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void stop();
  // How often it renews and when it calls a lease lost, for a TTL of `ttl_s` seconds.
  static std::chrono::milliseconds period(int64_t ttl_s);
  static std::chrono::milliseconds lost_after(int64_t ttl_s);

 private:
  void loop();

  EtcdClient& etcd_;
  const int64_t ttl_s_;
  const Hooks hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ptcfs::transport
