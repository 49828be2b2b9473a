// Who is in the cluster and where a change is decided, behind one interface for the two
// modes (docs/ARCHITECTURE.md "A cluster", docs/FORMATS.md "Keys in etcd"):
//
// - static (cluster.json): the members are the file's nodes, in its order; a change is
//   decided by the coordinator alone (decide() always holds);
// - etcd (daemon/cluster/etcd_membership.h): the members are the live nodes registered under
//   their leases, by id; a change is decided by one etcd transaction that checks the record
//   it was prepared against and the coordinator's lease.
//
// Records are JSON values under keys (docs/FORMATS.md "Keys in etcd"): the committed version
// of a step (`/ptcfs/steps/<job>/<step>`) or of a dataset (`/ptcfs/datasets/<job>/<name>`).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"
#include "ptc/cluster.h"
#include "transport/backend.h"

namespace ptcfs {

// A record as read: its value and the revision it was written at (0: there is none).
struct Record {
  int64_t revision = 0;
  nlohmann::json value;
};

std::string etcd_step_key(const std::string& job, const std::string& step);
std::string etcd_dataset_key(const std::string& job, const std::string& name);
// The job and step of a step key; false for any other key.
bool parse_etcd_step_key(const std::string& key, std::string& job, std::string& step);
// The job and name of a dataset key; false for any other key.
bool parse_etcd_dataset_key(const std::string& key, std::string& job, std::string& name);

class Membership {
 public:
  virtual ~Membership() = default;

  // The members now, as indices into the peer backend's node table, in placement order.
  virtual std::vector<int> members() const = 0;
  // ok, or why this node may not take part in a change now (it lost etcd: fenced).
  virtual Status can_change() const = 0;
  // This node's lease (0 in static mode).
  virtual int64_t lease() const = 0;
  // Whether the node `id` still holds lease `lease` (a coordinator's, of a prepared change).
  virtual bool lease_alive(const std::string& id, int64_t lease) const = 0;
  virtual Result<Record> read(const std::string& key) = 0;
  // The commit decision: writes `value` under `key` if the key is still at `revision` (0: it
  // must not exist) and this node still holds `lease`. false: the check failed (another change
  // won, or the lease is gone); an error: etcd did not answer, the outcome is unknown.
  // `lease`: the lease the change was prepared under (its participants drop their parts when it
  // ends); the check fails when this node holds another one now (it lost that lease, stopped or
  // cut off past its TTL, and registered again), since the parts it would commit may be gone.
  virtual Result<bool> decide(const std::string& key, int64_t revision, const nlohmann::json& value, int64_t lease) = 0;
  // How long a coordinator may go on asking for a decision whose outcome is unknown (etcd
  // lost a member and elects a leader; this node is fenced for an instant): the lease's TTL,
  // after which the lease check fails and no retry can win anyway. Zero in static mode.
  virtual std::chrono::milliseconds decision_window() const = 0;
  // Takes the lock of `key` for this node's lease (a second coordinator of the same step is
  // refused at once, naming the holder, instead of both preparing and both failing); free
  // it with unlock(). It goes with the lease if this node dies.
  virtual Status lock(const std::string& key) = 0;
  virtual void unlock(const std::string& key) = 0;
  // Adds to the peer backend any of `ids` it does not know yet (a node that joined an instant
  // ago, whose registration this node's watch has not delivered yet).
  virtual void learn(const std::vector<std::string>& ids) = 0;
  // For `ptcfs status`: {"mode": "static"} or etcd's endpoints, lease, fenced.
  virtual nlohmann::json describe() const = 0;
};

// cluster.json's nodes, all members, in the file's order.
class StaticMembership final : public Membership {
 public:
  explicit StaticMembership(const transport::PeerBackend& peers) : peers_(peers) {}
  std::vector<int> members() const override;
  Status can_change() const override { return Status::ok(); }
  int64_t lease() const override { return 0; }
  bool lease_alive(const std::string&, int64_t) const override { return true; }
  Result<Record> read(const std::string&) override { return Record{}; }
  Result<bool> decide(const std::string&, int64_t, const nlohmann::json&, int64_t) override { return true; }
  std::chrono::milliseconds decision_window() const override { return std::chrono::milliseconds(0); }
  Status lock(const std::string&) override { return Status::ok(); }
  void unlock(const std::string&) override {}
  void learn(const std::vector<std::string>&) override {}
  nlohmann::json describe() const override { return {{"mode", "static"}}; }

 private:
  const transport::PeerBackend& peers_;
};

}  // namespace ptcfs
