// Membership and commit decisions on etcd (daemon/cluster/membership.h).
//
// The node registers `/ptcfs/nodes/<id>` ({"id", "addr", "gpus"}) under a lease of its own
// and keeps the lease alive; a node that stops renewing it (killed, partitioned) is gone
// when it expires. One watch of `/ptcfs/` keeps the member list current (a node that joins
// is added to the peer backend's table) and hands every step and dataset record to the
// record handler: that is how a node learns a change it prepared was committed even when
// the coordinator's commit message never reached it, and how it catches up.
//
// Self-fencing: a node that cannot renew its lease for half its TTL stops taking part in
// changes (can_change() fails, the log and `ptcfs status` say so); reads of what it holds go
// on. When etcd answers again it renews, or registers under a new lease if the old one expired.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/membership.h"
#include "transport/etcd_client.h"
#include "transport/etcd_lease.h"

namespace ptcfs {

struct EtcdOptions {
  std::string urls;        // comma-separated http://HOST:PORT or https://HOST:PORT
  transport::EtcdTls tls;  // for https://
  std::string id, addr;
  int gpus = 1;
  int64_t lease_ttl_s = 10;
};

class EtcdMembership final : public Membership {
 public:
  using RecordHandler = std::function<void(const KeyedRecord& record)>;

  // Registers this node (the first node of `peers`' table) and reads the live members into
  // `peers`. Fails when etcd cannot be reached, or a live node at another address holds the
  // id. `peers` must outlive this object.
  static Result<std::unique_ptr<EtcdMembership>> join(const EtcdOptions& options, transport::PeerBackend& peers);
  // Stops the threads and revokes the lease: a node that stops cleanly leaves at once.
  // Idempotent; the destructor calls it.
  void stop();
  ~EtcdMembership() override { stop(); }

  // Starts keeping the lease alive and watching; `on_record` gets every step and dataset
  // record present at each (re)start of the watch and every one written afterwards, in order,
  // decoded (daemon/cluster/etcd_record.h); one that does not decode is logged and skipped.
  void start(RecordHandler on_record);
  // Whether the watch has delivered every record etcd held when it first read them all.
  bool synced() const { return synced_.load(); }

  std::vector<int> members() const override;
  Status can_change() const override;
  int64_t lease() const override { return lease_.load(); }
  bool lease_alive(const std::string& id, int64_t lease) const override;
  Result<Record> read(const std::string& key) override;
  Result<bool> decide(const std::string& key, int64_t revision, const nlohmann::json& value, int64_t lease) override;
  std::chrono::milliseconds decision_window() const override { return std::chrono::seconds(options_.lease_ttl_s); }
  Status lock(const std::string& key) override;
  void unlock(const std::string& key) override;
  void learn(const std::vector<std::string>& ids) override;
  nlohmann::json describe() const override;

 private:
  EtcdMembership(EtcdOptions options, std::unique_ptr<transport::EtcdClient> etcd, transport::PeerBackend& peers)
      : options_(std::move(options)), etcd_(std::move(etcd)), peers_(peers) {}
  Status register_node();
  void watch_loop();
  void retry_unlocks();
  void apply(const std::string& key, const std::string& value, bool deleted, int64_t lease);

  EtcdOptions options_;
  std::unique_ptr<transport::EtcdClient> etcd_;
  transport::PeerBackend& peers_;
  RecordHandler on_record_;
  std::atomic<int64_t> lease_{0};
  std::atomic<bool> fenced_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> resync_{false};  // the watch starts over (after etcd was unreachable)
  std::atomic<bool> synced_{false};  // the first full read was delivered
  // Frees lock `key` if it still holds `token` (a lock taken by this attempt); owed when etcd does not answer.
  void release(const std::string& key, const std::string& token);

  mutable std::mutex mu_;                    // guards live_, held_, owed_unlocks_, lock_seq_
  std::map<std::string, int64_t> live_;      // id -> lease
  std::map<std::string, std::string> held_;  // key -> the token of the lock this node holds on it
  // (key, token): locks whose release etcd did not answer, and locks whose take it did not answer
  // (the take may still commit: its token is released when etcd answers, so it cannot freeze the key).
  std::vector<std::pair<std::string, std::string>> owed_unlocks_;
  uint64_t lock_seq_ = 0;
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  std::unique_ptr<transport::LeaseKeeper> keeper_;  // this node's lease, renewed (transport/etcd_lease.h)
  std::thread watch_thread_;
};

}  // namespace ptcfs
