#include "daemon/cluster/etcd_membership.h"

#include <algorithm>

#include "daemon/store/failpoint.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"

namespace ptcfs {

using nlohmann::json;

namespace {

const std::string kRoot = "/ptcfs/";
const std::string kNodes = "/ptcfs/nodes/";

const std::string kLocks = "/ptcfs/locks/";

std::string node_key(const std::string& id) { return kNodes + id; }
// "/ptcfs/steps/j/1" -> "/ptcfs/locks/steps/j/1".
std::string lock_key(const std::string& key) { return kLocks + key.substr(kRoot.size()); }

json node_value(const EtcdOptions& o) { return to_json(NodeRecord{o.id, o.addr, o.gpus}); }

}  // namespace

Result<std::unique_ptr<EtcdMembership>> EtcdMembership::join(const EtcdOptions& options,
                                                             transport::PeerBackend& peers) {
  // Calls to etcd wait at most a quarter of the lease: a node notices it is cut off in time to fence.
  const auto timeout = std::chrono::milliseconds(std::clamp<int64_t>(options.lease_ttl_s * 250, 200, 2000));
  PTC_ASSIGN_OR_RETURN(auto client, transport::EtcdClient::make(options.urls, timeout, options.tls), "--etcd");
  std::unique_ptr<EtcdMembership> m(new EtcdMembership(options, std::move(client), peers));
  PTC_ASSIGN_OR_RETURN(auto existing, m->etcd_->get(node_key(options.id)), "reading node " + options.id + " from etcd");
  if (existing) {
    // A record that does not decode is no daemon's registration: this node's replaces it.
    auto rec = node_record_from_json(parse_json_lenient(existing->value), options.id);
    if (!rec)
      log::warn("{}; registering over it", rec.status().message());
    else if (rec->addr != options.addr)
      return error(Code::kAlreadyExists, "node id '" + options.id + "' is registered in etcd by a live daemon at " +
                                             rec->addr +
                                             " (stop it, wait for its lease to expire, or choose another --node)");
  }
  PTC_RETURN_IF_ERROR(m->register_node());
  PTC_ASSIGN_OR_RETURN(auto nodes, m->etcd_->range_prefix(kNodes), "reading the members from etcd");
  for (const auto& kv : nodes.kvs) m->apply(kv.key, kv.value, false, kv.lease);
  return m;
}

Status EtcdMembership::register_node() {
  PTC_ASSIGN_OR_RETURN(const int64_t lease, etcd_->grant(options_.lease_ttl_s), "granting a lease in etcd");
  PTC_RETURN_IF_ERROR(etcd_->put(node_key(options_.id), node_value(options_).dump(), lease),
                      "registering node " + options_.id + " in etcd");
  lease_ = lease;
  {
    std::lock_guard lock(mu_);
    live_[options_.id] = lease;
  }
  log::info("node {} registered in etcd at {} (lease {:x}, {} s)", options_.id, etcd_->urls(), lease,
            options_.lease_ttl_s);
  return Status::ok();
}

void EtcdMembership::stop() {
  {
    std::lock_guard lock(wait_mu_);
    if (stopping_.exchange(true)) return;
  }
  wait_cv_.notify_all();
  if (keeper_) keeper_->stop();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (lease_.load() == 0) return;  // a join that failed before registering: nothing to leave
  if (auto s = etcd_->revoke(lease_.load()); !s)
    log::warn("leaving etcd: {}", s.to_string());
  else
    log::info("node {} left the cluster in etcd", options_.id);
}

void EtcdMembership::start(RecordHandler on_record) {
  on_record_ = std::move(on_record);
  transport::LeaseKeeper::Hooks hooks;
  hooks.lease = [this] { return lease_.load(); };
  hooks.expired = [this] {
    log::warn("node {}: its etcd lease expired; registering again", options_.id);
    return register_node();
  };
  hooks.renewed = [this] {
    retry_unlocks();
    if (fenced_.exchange(false))
      log::info("node {}: etcd answers again; it takes part in cluster changes again", options_.id);
  };
  hooks.lost = [this](const Status& why) {
    if (!fenced_.exchange(true)) {
      resync_ = true;
      log::error(
          "node {}: cannot renew its etcd lease for half its TTL ({}); it takes part in no cluster change "
          "until etcd answers (fenced); reads of what it holds go on",
          options_.id, why.to_string());
    }
    return true;  // renewing goes on: the node comes back when etcd answers
  };
  keeper_ = std::make_unique<transport::LeaseKeeper>(*etcd_, options_.lease_ttl_s, std::move(hooks));
  watch_thread_ = std::thread([this] { watch_loop(); });
}

void EtcdMembership::apply(const std::string& key, const std::string& value, bool deleted, int64_t lease) {
  if (key.rfind(kNodes, 0) == 0) {
    const std::string id = key.substr(kNodes.size());
    if (deleted) {
      std::lock_guard lock(mu_);
      if (live_.erase(id) && id != options_.id) log::info("node {} left the cluster (its lease ended)", id);
      return;
    }
    auto rec = node_record_from_json(parse_json_lenient(value), id);
    if (!rec) {
      log::warn("etcd key {}: {}; ignored", key, rec.status().message());
      return;
    }
    ptc::NodeSpec spec{id, rec->addr, rec->gpus};
    peers_.add_node(spec);
    std::lock_guard lock(mu_);
    auto [it, added] = live_.insert_or_assign(id, lease);
    if (added && id != options_.id) log::info("node {} joined the cluster at {} ({} GPUs)", id, spec.addr, spec.gpus);
    return;
  }
  if (deleted || !on_record_ || key.rfind(kLocks, 0) == 0) return;
  // Decoded here, on the watch thread, into a typed record that never throws: a record that
  // does not decode is logged by its key and skipped; every other one still reaches the node.
  auto rec = keyed_record(key, parse_json_lenient(value));
  if (!rec) {
    log::warn("{}; ignored", rec.status().message());
    return;
  }
  on_record_(*rec);
}

void EtcdMembership::watch_loop() {
  auto stop = [this] { return stopping_.load() || resync_.load(); };
  while (!stopping_) {
    resync_ = false;
    auto all = etcd_->range_prefix(kRoot);
    if (all) {
      std::map<std::string, int64_t> seen;
      for (const auto& kv : all->kvs)
        if (kv.key.rfind(kNodes, 0) == 0) seen[kv.key.substr(kNodes.size())] = kv.lease;
      {
        std::lock_guard lock(mu_);
        for (auto it = live_.begin(); it != live_.end();) {
          if (!seen.count(it->first) && it->first != options_.id) {
            log::info("node {} left the cluster (its lease ended)", it->first);
            it = live_.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (const auto& kv : all->kvs) apply(kv.key, kv.value, false, kv.lease);
      synced_ = true;
      auto s = etcd_->watch_prefix(
          kRoot, all->revision + 1,
          [this](const transport::EtcdEvent& e) { apply(e.kv.key, e.kv.value, e.deleted, e.kv.lease); }, stop);
      if (!s && !stopping_) log::debug("watch of etcd: {}; starting again", s.to_string());
    }
    std::unique_lock lock(wait_mu_);
    wait_cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stopping_.load(); });
  }
}

std::vector<int> EtcdMembership::members() const {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, lease] : live_) ids.push_back(id);  // by id: a std::map's order
  }
  const auto table = peers_.cluster();
  std::vector<int> out;
  for (const auto& id : ids)
    if (const int n = table->find(id); n >= 0) out.push_back(n);
  return out;
}

Status EtcdMembership::can_change() const {
  if (fenced_)
    return unavailable("node " + options_.id + " cannot reach etcd (" + etcd_->urls() +
                       ") and takes part in no cluster change until it can");
  return Status::ok();
}

bool EtcdMembership::lease_alive(const std::string& id, int64_t lease) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(id);
  return it != live_.end() && it->second == lease;
}

Result<Record> EtcdMembership::read(const std::string& key) {
  PTC_ASSIGN_OR_RETURN(auto kv, etcd_->get(key), "reading " + key + " from etcd");
  Record r;
  if (!kv) return r;
  r.revision = kv->mod_revision;
  r.value = parse_json_lenient(kv->value);
  if (r.value.is_discarded()) return corrupt("etcd key " + key + " holds no JSON");
  return r;
}

Result<bool> EtcdMembership::decide(const std::string& key, int64_t revision, const json& value, int64_t lease) {
  PTC_RETURN_IF_ERROR(can_change());
  if (lease != lease_.load()) return false;  // the lease it was prepared under ended
  return etcd_->txn(
      {transport::EtcdCompare::mod_is(key, revision), transport::EtcdCompare::lease_is(node_key(options_.id), lease)},
      {transport::EtcdWrite::put(key, value.dump())});
}

Status EtcdMembership::lock(const std::string& key) {
  PTC_RETURN_IF_ERROR(can_change());
  const std::string lk = lock_key(key);
  std::string who = "another node";
  // A lock freed between the failed take and the read of its holder is taken again, so that a
  // refusal always names the holder it read (a few tries: each lost one had a holder).
  for (int attempt = 0; attempt < 3; ++attempt) {
    // The lock's value is this attempt's token, "<node id>#<lease>.<n>": a release frees only the
    // lock its own attempt took, never a later one of the same node.
    std::string token;
    {
      std::lock_guard lock(mu_);
      token = options_.id + "#" + std::to_string(lease_.load()) + "." + std::to_string(++lock_seq_);
    }
    auto got =
        etcd_->txn({transport::EtcdCompare::mod_is(lk, 0)}, {transport::EtcdWrite::put(lk, token, lease_.load())});
    if (got && failpoint_switch("etcd.lock.reply_lost"))
      got = unavailable("etcd's answer was lost (failpoint etcd.lock.reply_lost)");
    if (!got) {
      // The take's outcome is unknown (etcd may apply it later): settled like any unknown
      // outcome, by releasing this token once etcd answers.
      {
        std::lock_guard lock(mu_);
        owed_unlocks_.emplace_back(key, token);
      }
      return Status(got.status().code(), "locking " + key + " in etcd: " + got.status().message());
    }
    if (*got) {
      std::lock_guard lock(mu_);
      held_[key] = token;
      return Status::ok();
    }
    auto holder = etcd_->get(lk);
    if (!holder) break;  // etcd stopped answering: refuse, without a name
    if (*holder) {
      who = (*holder)->value.substr(0, (*holder)->value.find('#'));
      break;
    }
  }
  const std::string kind_and_name = key.substr(kRoot.size());  // "steps/j/1"
  return error(Code::kFailedPrecondition, kind_and_name.substr(kind_and_name.find('/') + 1) +
                                              " is being changed by another coordinator (node " + who +
                                              "); try again when it is done");
}

void EtcdMembership::unlock(const std::string& key) {
  std::string token;
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(key);
    if (it == held_.end()) return;  // not held (its take failed, and is owed a release if unknown)
    token = std::move(it->second);
    held_.erase(it);
  }
  release(key, token);
}

void EtcdMembership::release(const std::string& key, const std::string& token) {
  auto s = etcd_->txn({transport::EtcdCompare::value_is(lock_key(key), token)},
                      {transport::EtcdWrite::erase(lock_key(key))});
  if (s) return;
  log::warn("unlocking {} in etcd: {}; tried again when etcd answers", key, s.status().to_string());
  std::lock_guard lock(mu_);
  owed_unlocks_.emplace_back(key, token);
}

void EtcdMembership::retry_unlocks() {
  std::vector<std::pair<std::string, std::string>> owed;
  {
    std::lock_guard lock(mu_);
    owed.swap(owed_unlocks_);
  }
  for (const auto& [key, token] : owed) release(key, token);
}

void EtcdMembership::learn(const std::vector<std::string>& ids) {
  const auto table = peers_.cluster();
  for (const auto& id : ids) {
    if (table->find(id) >= 0) continue;
    auto kv = etcd_->get(node_key(id));
    if (kv && *kv) apply((*kv)->key, (*kv)->value, false, (*kv)->lease);
  }
}

json EtcdMembership::describe() const {
  return {{"mode", "etcd"},
          {"endpoints", etcd_->urls()},
          {"lease_ttl_s", options_.lease_ttl_s},
          {"fenced", fenced_.load()}};
}

}  // namespace ptcfs
