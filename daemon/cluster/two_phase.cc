#include "daemon/cluster/two_phase.h"

#include <algorithm>
#include <thread>

#include "daemon/cluster/nodes.h"
#include "daemon/store/failpoint.h"
#include "ptc/base/log.h"

namespace ptcfs {

namespace {

nlohmann::json record_json(const ChangeRecord& r) {
  return std::visit([](const auto& v) { return to_json(v); }, r);
}

// What settle_undecided writes over `r` so that the lost transaction `tx`, which compares the
// record's revision, can never apply: the record as it is, marked `fenced`, or where there
// was none a removal (nothing to remove: nodes keep what they have). A record that does not
// decode is written back unchanged: the write alone moves its revision.
nlohmann::json fence_over(const std::string& key, const Record& r, const std::string& tx) {
  if (r.revision == 0) {
    StepRecord none;
    none.removed = true;
    none.fenced = tx;
    return to_json(none);
  }
  auto rec = keyed_record(key, r.value);
  if (!rec) return r.value;
  return std::visit(
      [&](auto v) {
        v.fenced = tx;
        return to_json(v);
      },
      rec->value);
}

bool unreachable(const Status& s) { return s.code() == Code::kUnavailable || s.code() == Code::kDeadlineExceeded; }

}  // namespace

StepRecord step_record(std::string kind, uint64_t version, std::vector<std::string> nodes, std::vector<int> gpus) {
  StepRecord r;
  r.kind = std::move(kind);
  r.version = version;
  r.nodes = std::move(nodes);
  r.gpus = std::move(gpus);
  r.removed = r.kind == "remove";
  return r;
}

DatasetRecord dataset_record(std::string kind, uint64_t version) {
  DatasetRecord r;
  r.kind = std::move(kind);
  r.version = version;
  return r;
}

PrepareRequest TwoPhase::request(decltype(PrepareRequest::change) change) const {
  return PrepareRequest{new_transaction_id(), std::move(change), self_id_, members_.lease()};
}

Result<TwoPhase::Locked> TwoPhase::lock(const std::string& key) {
  PTC_RETURN_IF_ERROR(members_.can_change());
  // A change of the key this node coordinated and etcd did not answer the decision of still
  // holds the key's lock: settle it first (etcd answers now, or the lock below is refused).
  settle_undecided();
  {
    std::lock_guard lock(mu_);
    for (const auto& u : undecided_)
      if (u.key == key)
        return error(Code::kFailedPrecondition,
                     u.what + " (transaction " + u.tx + ", coordinated by this node, " + self_id_ +
                         ") is not settled yet: etcd did not answer its commit; try again when etcd answers");
  }
  PTC_RETURN_IF_ERROR(members_.lock(key));
  Locked out(members_, key);
  PTC_ASSIGN_OR_RETURN(out.prior_, members_.read(key));
  if (out.prior_.revision != 0) {
    PTC_ASSIGN_OR_RETURN(out.record_, keyed_record(key, out.prior_.value));
  }
  return out;
}

Status TwoPhase::finish_all(const std::vector<int>& nodes, const std::string& tx, bool commit, const std::string& why) {
  const auto answers = peers_.finish(nodes, FinishRequest{tx, commit, why});
  Status first;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (answers[i]) continue;
    if (first.is_ok()) first = answers[i];
    if (!commit) {
      log::warn("node {} missed the abort of transaction {} ({}); it is sent again until the node answers",
                peers_.name_of(nodes[i]), tx, answers[i].to_string());
      std::lock_guard lock(mu_);
      unaborted_.emplace_back(nodes[i], tx);
    }
  }
  return first;
}

Status TwoPhase::prepare_all(const ChangeSpec& spec, Prepared& out, std::vector<int>& taking_part, bool& checked) {
  checked = false;
  std::vector<int> asked;
  for (int n : spec.nodes)
    if (!spec.held.count(n)) asked.push_back(n);
  const auto answers = peers_.prepare(asked, spec.request);
  Status failed;
  for (size_t i = 0; i < asked.size(); ++i) {
    const auto& r = answers[i];
    if (r) {
      out.nodes.push_back(asked[i]);
      out.replies.push_back(*r);
    } else if (spec.quorum == ChangeSpec::Quorum::kReachable && asked[i] != self_ && unreachable(r.status())) {
      log::warn("{}: node {} is unreachable: {}", spec.what, peers_.name_of(asked[i]), r.status().to_string());
    } else if (failed.is_ok()) {
      failed = r.status();
    }
  }
  // kAll: commits and aborts go to every node (one that failed may have prepared all the
  // same); kReachable: to those that hold their part (the others catch up later).
  taking_part = spec.nodes;
  if (spec.quorum == ChangeSpec::Quorum::kReachable)
    std::erase_if(taking_part, [&](int n) {
      return !spec.held.count(n) && std::find(out.nodes.begin(), out.nodes.end(), n) == out.nodes.end();
    });
  if (failed.is_ok() && spec.check) {
    failed = spec.check(out.nodes, out.replies);
    checked = !failed.is_ok();
  }
  return failed;
}

Result<TwoPhase::Prepared> TwoPhase::run(Locked& prior, ChangeSpec spec) {
  const std::string& tx = spec.request.tx;
  if (spec.progress) spec.progress("prepare", 0, spec.nodes.size());
  Prepared prepared;
  std::vector<int> taking_part;
  bool checked = false;
  if (auto failed = prepare_all(spec, prepared, taking_part, checked); !failed) {
    (void)finish_all(taking_part, tx, false, checked ? failed.message() : std::string());
    log::warn("{} aborted on every node: {}", spec.what, failed.to_string());
    return spec.refused.empty() ? failed : failed.with_context(spec.refused);
  }
  if (spec.progress) spec.progress("commit", 0, taking_part.size());
  PTC_RETURN_IF_ERROR(decide(taking_part, tx, spec.request.lease, prior, std::move(spec.record), spec.what));
  return prepared;
}

Status TwoPhase::decide(const std::vector<int>& nodes, const std::string& tx, int64_t lease, Locked& prior,
                        ChangeRecord record, const std::string& what) {
  failpoint("coordinator.prepared");
  std::visit(
      [&](auto& r) {
        r.tx = tx;
        r.coordinator = self_id_;
      },
      record);
  const nlohmann::json value = record_json(record);
  const std::string& key = prior.key_;
  // An unknown outcome (etcd lost a member and elects a leader, or this node fenced itself
  // for an instant) is asked again until the decision window ends. Asking again is safe: the
  // transaction checks the record's revision and this node's lease, so at most one applies,
  // and a read that finds the record moved tells which one did.
  const auto until = std::chrono::steady_clock::now() + members_.decision_window();
  auto won = members_.decide(key, prior.revision(), value, lease);
  const bool unanswered = !won;
  if (unanswered) log::warn("{}: etcd did not answer the commit ({}); asking again", what, won.status().to_string());
  while (!won && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    won = members_.decide(key, prior.revision(), value, lease);
  }
  if (unanswered && !(won && *won) && members_.can_change().is_ok()) {
    // An unanswered attempt may have been applied: the record tells.
    if (auto back = members_.read(key); back && back->revision != prior.revision())
      won = written_by(key, back->value, tx);
  }
  if (!won) {
    // Unknown outcome (etcd did not answer): settle_undecided() settles it once etcd answers.
    // Until then the change still holds the key: its lock stays taken (a change retried
    // meanwhile is refused naming this node), and goes when the change is settled, or with
    // this node's lease.
    {
      std::lock_guard lock(mu_);
      undecided_.push_back(Undecided{nodes, tx, key, prior.prior_, what});
      prior.members_ = nullptr;
    }
    return won.status().with_context(
        what + ": etcd did not answer the commit; node " + self_id_ + " keeps " + key +
        " locked until etcd answers, then, within a second, the change is aborted on every node (committed, if "
        "etcd recorded it) and the lock is freed; if node " +
        self_id_ + " stops first, the lock goes with its lease (" +
        std::to_string(members_.decision_window().count() / 1000) + " s)");
  }
  if (!*won) {
    (void)finish_all(nodes, tx, false);
    return error(Code::kFailedPrecondition, what + " aborted on every node: " + key +
                                                " changed in etcd since it was prepared (another "
                                                "change committed first), or this node's lease ended");
  }
  failpoint("coordinator.decided");
  auto s = finish_all(nodes, tx, true);
  if (!s && members_.lease() != 0) {
    log::warn("{}: committed in etcd; a node missed the commit message ({}) and switches when it sees the record", what,
              s.to_string());
    return Status::ok();
  }
  return s.with_context(what + " committed partly");
}

void TwoPhase::settle_undecided() {
  // Nothing settles while this node cannot reach etcd (fenced); called every second, it must
  // not wait on etcd each time meanwhile.
  if (!members_.can_change()) return;
  std::vector<Undecided> owed;
  {
    std::lock_guard lock(mu_);
    owed.swap(undecided_);
  }
  for (auto& u : owed) {
    // Make the lost answer final: the record was written by this change (commit it), or it
    // is rewritten now so that this change's transaction can never apply (abort it).
    auto rec = members_.read(u.key);
    bool commit = false;
    if (rec && written_by(u.key, rec->value, u.tx)) {
      commit = true;
    } else if (rec) {
      auto done = rec->revision == u.prior.revision
                      ? members_.decide(u.key, rec->revision, fence_over(u.key, *rec, u.tx), members_.lease())
                      : Result<bool>(true);
      if (!done || !*done) rec = unavailable("retry");  // read again next time
    }
    if (!rec) {
      std::lock_guard lock(mu_);
      undecided_.push_back(std::move(u));
      continue;
    }
    (void)finish_all(u.nodes, u.tx, commit);
    members_.unlock(u.key);  // held since the decision went unanswered (decide)
    log::info("{}: etcd answers again; the change is {} on every node and {} is free", u.what,
              commit ? "committed" : "aborted", u.key);
  }
}

size_t TwoPhase::retry_aborts() {
  std::vector<std::pair<int, std::string>> owed;
  {
    std::lock_guard lock(mu_);
    owed.swap(unaborted_);
    last_retry_ = std::chrono::steady_clock::now();
  }
  std::vector<std::pair<int, std::string>> still;
  for (const auto& [node, tx] : owed) {
    const auto r = peers_.finish({node}, FinishRequest{tx, false, {}});
    if (r.front())
      log::info("node {} took the abort of transaction {} it had missed", peers_.name_of(node), tx);
    else
      still.emplace_back(node, tx);
  }
  std::lock_guard lock(mu_);
  unaborted_.insert(unaborted_.end(), still.begin(), still.end());
  return unaborted_.size();
}

size_t TwoPhase::settle() {
  settle_undecided();
  {
    std::lock_guard lock(mu_);
    if (unaborted_.empty() || std::chrono::steady_clock::now() - last_retry_ < abort_retry_) return unaborted_.size();
  }
  return retry_aborts();
}

size_t TwoPhase::undecided() const {
  std::lock_guard lock(mu_);
  return undecided_.size();
}

size_t TwoPhase::unaborted() const {
  std::lock_guard lock(mu_);
  return unaborted_.size();
}

}  // namespace ptcfs
