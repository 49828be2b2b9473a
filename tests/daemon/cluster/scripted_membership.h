// etcd as a map for the cluster's unit tests (TwoPhase, Participant): its decisions, locks,
// leases and records, with etcd going silent and other writers on cue.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/cluster/membership.h"

namespace ptcfs::testing {

using nlohmann::json;

class ScriptedMembership final : public Membership {
 public:
  std::vector<int> nodes = {0, 1, 2};
  bool etcd_down = false;              // read, decide, lock: kUnavailable
  bool lease_lost = false;             // decide: the lease check fails
  std::set<std::string> leases_ended;  // the nodes whose (coordinator's) lease ended
  int64_t current_lease = 7;           // the lease this node holds now
  bool apply_then_drop = false;        // decide applies the write, but its answer is lost (etcd goes down)
  std::function<void()> before_decide;
  std::map<std::string, Record> records;
  std::map<std::string, std::string> locks;  // key -> holder
  int decides = 0;

  std::vector<int> members() const override { return nodes; }
  Status can_change() const override { return Status::ok(); }
  int64_t lease() const override { return lease_lost ? 0 : current_lease; }
  bool lease_alive(const std::string& id, int64_t) const override { return !lease_lost && !leases_ended.count(id); }
  Result<Record> read(const std::string& key) override {
    if (etcd_down) return unavailable("etcd does not answer");
    auto it = records.find(key);
    return it == records.end() ? Record{} : it->second;
  }
  Result<bool> decide(const std::string& key, int64_t revision, const json& value, int64_t lease) override {
    ++decides;
    if (before_decide) std::exchange(before_decide, nullptr)();
    if (etcd_down) return unavailable("etcd does not answer");
    if (lease_lost || lease != current_lease || read(key)->revision != revision) return false;
    write(key, value);
    if (apply_then_drop) {
      apply_then_drop = false;
      etcd_down = true;
      return unavailable("etcd does not answer");
    }
    return true;
  }
  std::chrono::milliseconds decision_window() const override { return std::chrono::milliseconds(0); }
  Status lock(const std::string& key) override {
    if (etcd_down) return unavailable("etcd does not answer");
    if (auto it = locks.find(key); it != locks.end())
      return error(Code::kFailedPrecondition, key + " is being changed by node " + it->second);
    locks[key] = "n0";
    return Status::ok();
  }
  void unlock(const std::string& key) override { locks.erase(key); }
  void learn(const std::vector<std::string>&) override {}
  json describe() const override { return {{"mode", "scripted"}}; }

  void write(const std::string& key, const json& value) {
    auto& r = records[key];
    r.value = value;
    r.revision = ++revision_;
  }

 private:
  int64_t revision_ = 100;
};

}  // namespace ptcfs::testing
