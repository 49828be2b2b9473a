#include "daemon/cluster/participant.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "daemon/cluster/etcd_record.h"
#include "daemon/store/prepared_record.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"

namespace ptcfs {

namespace {

constexpr size_t kRemember = 256;

// The version a part makes of its record: its step's, or, for a change of a dataset alone (a
// progress), that dataset's; 0 when it makes none (a removal).
uint64_t makes(const PreparedChange& c) {
  if (c.next) return c.next->version();
  return c.datasets.size() == 1 ? c.datasets.front().next->version() : 0;
}

}  // namespace

std::string_view to_string(TxState s) {
  switch (s) {
    case TxState::kUnknown:
      return "unknown";
    case TxState::kPreparing:
      return "preparing";
    case TxState::kPrepared:
      return "prepared";
    case TxState::kCommitting:
      return "committing";
    case TxState::kCommitted:
      return "committed";
    case TxState::kAborted:
      return "aborted";
  }
  return "?";
}

void Participant::Preparing::end() {
  if (!table_) return;
  std::lock_guard lock(table_->mu_);
  table_->preparing_.erase(tx_);
  table_ = nullptr;
}

void Participant::remember(std::deque<std::string>& memory, const std::string& tx) {
  if (in(memory, tx)) return;
  memory.push_back(tx);
  if (memory.size() > kRemember) memory.pop_front();
}

bool Participant::in(const std::deque<std::string>& memory, const std::string& tx) {
  return std::find(memory.begin(), memory.end(), tx) != memory.end();
}

Result<Participant::Preparing> Participant::begin(const std::string& tx) {
  std::lock_guard lock(mu_);
  if (preparing_.count(tx) || held_.count(tx) || committing_.count(tx) || in(committed_, tx))
    return error(Code::kAlreadyExists,
                 "node " + self_ + ": transaction " + tx + " is already " + std::string(to_string(state_locked(tx))));
  if (in(aborted_, tx))
    return error(Code::kFailedPrecondition,
                 "node " + self_ + ": transaction " + tx + " was aborted by its coordinator already");
  preparing_.insert(tx);
  return Preparing(this, tx);
}

Status Participant::prepared(Preparing preparing, PreparedChange change, const Decider& by,
                             std::optional<SavePart> save) {
  const std::string tx = preparing.tx();
  // With etcd deciding, this node keeps its part across a restart: once it answers "prepared",
  // the coordinator may commit, and this node's part must not die with it. A save's part too:
  // its blobs are sealed by now, and the record may name this node their holder.
  Held held{std::move(change), by, std::move(save), std::chrono::steady_clock::now(), false};
  if (by.lease != 0 && can_keep(held.change)) {
    const nlohmann::json about = {{"key", by.key}, {"coordinator", by.coordinator}, {"lease", by.lease}};
    if (auto s = keep_prepared(store_, tx, held.change, about); !s) {
      drop(tx, held);  // a save's part goes back to its pending step, to be tried again
      return s.with_context("node " + self_ + ": keeping the prepared change");
    }
    held.kept = true;
  }
  bool aborted = false, recorded = false;
  {
    std::lock_guard lock(mu_);
    preparing_.erase(tx);
    preparing.table_ = nullptr;
    aborted = in(aborted_, tx);
    if (!aborted) {
      held_.emplace(tx, std::move(held));
      recorded = in(recorded_, tx);
    }
  }
  if (aborted) {
    // The coordinator aborted it while this node prepared it: nothing of it stays.
    drop(tx, held);
    log::info("dropped the change of transaction {}: its coordinator aborted it while this node prepared it", tx);
    return error(Code::kFailedPrecondition, "node " + self_ + ": transaction " + tx +
                                                " was aborted by its coordinator before this node had "
                                                "prepared it");
  }
  if (recorded) {
    // Its record came while it was prepared (the others committed it without this node).
    log::info("transaction {} was recorded in etcd while this node prepared it; committing", tx);
    if (auto s = finish(tx, true); !s) log::error("committing transaction {} recorded in etcd: {}", tx, s.to_string());
  }
  return Status::ok();
}

void Participant::hold(const std::string& tx, PreparedChange change, const std::string& key) {
  std::lock_guard lock(mu_);
  held_.emplace(tx, Held{std::move(change), Decider{key, self_, members_.lease()}, std::nullopt,
                         std::chrono::steady_clock::now(), false});
}

void Participant::drop(const std::string& tx, Held& held, const std::string& why) {
  // A save's part is tried again, unless the abort says why that would not help.
  if (held.save && why.empty()) saves_.take_back(held.save->job, held.save->step, held.change);
  abort_change(store_, held.change);
  if (held.kept) forget_prepared(store_, tx);
  if (held.save) saves_.part_done(held.save->job, held.save->step, false, why);
}

Status Participant::finish(const std::string& tx, bool commit, const std::string& why) {
  std::optional<Held> held;
  std::promise<Status> outcome;
  std::shared_future<Status> under_way;
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(tx);
    if (it == held_.end()) {
      if (!commit) {
        // Aborting what was never prepared (or already aborted) is fine; one still being
        // prepared is dropped when its prepare ends (prepared()).
        remember(aborted_, tx);
        return Status::ok();
      }
      // Committed already (on its record in etcd), or being committed by another thread: a
      // commit answered before this node serves the new version would let the coordinator
      // report success too early, so that one is waited for.
      if (auto c = committing_.find(tx); c != committing_.end())
        under_way = c->second;
      else if (in(committed_, tx))
        return Status::ok();
      else
        return not_found("no prepared transaction " + tx + " on node " + self_);
    } else {
      held.emplace(std::move(it->second));
      held_.erase(it);
      if (commit)
        committing_.emplace(tx, outcome.get_future().share());
      else
        remember(aborted_, tx);
    }
  }
  if (under_way.valid()) return under_way.get();
  const std::string name = describe(held->change);
  if (!commit) {
    drop(tx, *held, why);
    log::info("aborted the change of {} (transaction {}){}", name, tx, why.empty() ? "" : ": " + why);
    return Status::ok();
  }
  auto replaced = held->change.next ? held->change.replaced : nullptr;
  held->change.origin = tx;  // every node commits the version under this transaction
  const Status committed = commit_change(store_, held->change).with_context("node " + self_);
  if (committed && replaced && replaced_) replaced_(std::move(replaced));
  if (held->kept) forget_prepared(store_, tx);  // committed, or (the commit failed) aborted
  {
    std::lock_guard lock(mu_);
    committing_.erase(tx);
    remember(committed ? committed_ : aborted_, tx);
  }
  if (held->save) saves_.part_done(held->save->job, held->save->step, committed.is_ok());
  outcome.set_value(committed);  // a save's part is done too: the mount shows it committed, not pending
  PTC_RETURN_IF_ERROR(committed);
  log::info("committed {} (transaction {})", name, tx);
  return Status::ok();
}

bool Participant::commit_decided(const std::string& tx) {
  {
    std::lock_guard lock(mu_);
    if (in(committed_, tx)) return true;
    if (!held_.count(tx) && !committing_.count(tx)) {
      remember(recorded_, tx);
      return false;
    }
  }
  auto s = finish(tx, true);  // commits it, or waits for the commit under way (the coordinator's peer.commit)
  if (!s) log::error("committing transaction {} recorded in etcd: {}", tx, s.to_string());
  return s.is_ok();
}

void Participant::drop_superseded(const std::string& key, const std::string& tx, uint64_t version, bool removed,
                                  std::chrono::seconds held) {
  std::vector<std::string> lost;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [t, h] : held_)
      if (h.by.key == key && t != tx && now - h.since >= held &&
          (removed || (makes(h.change) != 0 && version >= makes(h.change))))
        lost.push_back(t);
  }
  for (const auto& t : lost) {
    if (tx.empty())
      log::warn(
          "the change prepared for {} (transaction {}) was decided without this node: the others are at "
          "version {}; aborted here, caught up instead",
          key, t, version);
    else
      log::warn(
          "the change prepared for {} (transaction {}) can never commit: etcd records {} by transaction {}; "
          "aborted",
          key, t, removed ? "a removal" : "version " + std::to_string(version), tx);
    (void)finish(t, false);
  }
}

void Participant::restore() {
  auto kept = restore_prepared(store_);
  const bool decidable = members_.lease() != 0;
  for (auto& k : kept) {
    // Who decides it, as prepared() wrote it; anything else is decided by nobody: dropped.
    const std::string w = "kept change " + k.tx;
    auto lease = k.about.is_object() && k.about.contains("lease") ? get_int(k.about["lease"], w + " lease")
                                                                  : Result<int64_t>(int64_t{0});
    Held h{std::move(k.change),
           Decider{member_string_or(k.about, "key", "", w).value_or(""),
                   member_string_or(k.about, "coordinator", "", w).value_or(""), lease.value_or(0)},
           std::nullopt, std::chrono::steady_clock::now(), true};
    if (!decidable || h.by.key.empty() || h.by.lease == 0) {
      log::warn("dropping {} kept from before the restart (transaction {}): without etcd nothing decides it",
                describe(h.change), k.tx);
      drop(k.tx, h);
      continue;
    }
    std::lock_guard lock(mu_);
    held_.emplace(k.tx, std::move(h));
  }
}

size_t Participant::expire(std::chrono::seconds max_age) {
  struct Due {
    std::string tx, key, coordinator;
    bool lease_ended;
  };
  std::vector<Due> due;
  {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mu_);
    for (const auto& [tx, h] : held_) {
      const bool lease_ended = h.by.lease != 0 && !members_.lease_alive(h.by.coordinator, h.by.lease);
      if (lease_ended || now - h.since > max_age) due.push_back({tx, h.by.key, h.by.coordinator, lease_ended});
    }
  }
  size_t dropped = 0;
  for (const auto& d : due) {
    // A lease that ended cannot commit any more: the record now says for good whether the
    // coordinator committed before it died.
    if (d.lease_ended) {
      auto rec = members_.read(d.key);
      if (!rec) continue;  // etcd is unreachable: decide later
      if (written_by(d.key, rec->value, d.tx)) {
        if (auto s = finish(d.tx, true); !s) log::error("committing transaction {}: {}", d.tx, s.to_string());
        continue;
      }
    }
    log::warn("dropping the change prepared for {} by node {} (transaction {}): {}", d.key, d.coordinator, d.tx,
              d.lease_ended ? "that node's lease ended before it committed" : "it waited too long for a decision");
    (void)finish(d.tx, false);
    ++dropped;
  }
  return dropped;
}

Status Participant::blocked(Status why, const std::string& tx, const std::string& key, const std::string& job,
                            bool datasets) const {
  if (why.code() != Code::kFailedPrecondition) return why;
  // The same record, or, for a change of the job's datasets (a repartition re-splits them), a
  // part holding a dataset of the job (its claim refused this one).
  std::lock_guard lock(mu_);
  const Held* holder = nullptr;
  std::string holder_tx;
  for (const auto& [t, h] : held_) {
    if (t == tx) continue;
    const bool same_record = h.by.key == key;
    const bool holds_job_dataset =
        datasets && std::any_of(h.change.datasets.begin(), h.change.datasets.end(),
                                [&](const DatasetChange& d) { return d.next->job() == job; });
    if (same_record || (!holder && holds_job_dataset)) {
      holder = &h;
      holder_tx = t;
      if (same_record) break;
    }
  }
  if (!holder) return why;
  const std::string& by = holder->by.coordinator;
  return error(why.code(), why.message() + ": it holds the change that node " + by + " coordinates (transaction " +
                               holder_tx + "), not decided yet; that goes when " + by + " commits or aborts it" +
                               (holder->by.lease != 0 ? ", or when its lease ends" : ""));
}

std::shared_ptr<const DatasetVersion> Participant::dataset_added(const std::string& tx) const {
  std::lock_guard lock(mu_);
  auto it = held_.find(tx);
  if (it == held_.end() || it->second.change.datasets.size() != 1) return nullptr;
  return it->second.change.datasets.front().next;
}

TxState Participant::state(const std::string& tx) const {
  std::lock_guard lock(mu_);
  return state_locked(tx);
}

TxState Participant::state_locked(const std::string& tx) const {
  if (committing_.count(tx)) return TxState::kCommitting;
  if (held_.count(tx)) return TxState::kPrepared;
  if (preparing_.count(tx)) return TxState::kPreparing;
  if (in(committed_, tx)) return TxState::kCommitted;
  if (in(aborted_, tx)) return TxState::kAborted;
  return TxState::kUnknown;
}

size_t Participant::prepared_count() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

}  // namespace ptcfs
