// The follower (daemon/cluster/follower.h): a node brought to what the others committed
// without it.
#include "daemon/cluster/follower.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "daemon/cluster/change_record.h"
#include "daemon/dataset/dataset_ops.h"
#include "daemon/reshard/repartition.h"
#include "daemon/store/prepared.h"
#include "ptc/base/log.h"

namespace ptcfs {

namespace {
constexpr std::chrono::seconds kRetryUnrestored{15};
}  // namespace

std::vector<int> Follower::others() const {
  std::vector<int> out;
  for (int n : members_.members())
    if (n != peers_.self()) out.push_back(n);
  return out;
}

bool Follower::catch_up_step(const std::string& job, const std::string& step, uint64_t at_least,
                             const std::string& origin) {
  {
    std::lock_guard lock(catching_mu_);
    if (!catching_.insert({job, step}).second) return false;  // under way on another thread
  }
  const bool moved = catch_up_step_alone(job, step, at_least, origin);
  std::lock_guard lock(catching_mu_);
  catching_.erase({job, step});
  return moved;
}

bool Follower::catch_up_step_alone(const std::string& job, const std::string& step, uint64_t at_least,
                                   const std::string& origin) {
  const std::string name = job + "/" + step;
  const std::shared_ptr<const StepVersion> v = current_version(store_, job, step).value_or(nullptr);
  const uint64_t have = v ? v->version() : 0;
  // etcd records a version of the number this node has but another origin: the step was removed
  // and saved again under its name while this node was away. A peer serving that origin replaces it.
  const bool replaced = v && !origin.empty() && !v->origin().empty() && v->origin() != origin;
  const std::vector<int> peers = others();
  auto answers = peers_.state(peers, StateRequest{job, step});
  std::optional<StepState> newest;
  // Per version served (number, origin): the origin of its durable copy, by the first peer serving
  // it that knows one (a peer whose copy is not whole yet knows none).
  std::map<std::pair<uint64_t, std::string>, std::string> copy_origins;
  for (auto& s : answers) {
    if (!s) {
      if (s.status().code() == Code::kInvalidArgument) log::warn("catching up {}: {}", name, s.status().to_string());
      continue;
    }
    if (!s->copy_origin.empty()) copy_origins.emplace(std::pair{s->version, s->origin}, s->copy_origin);
    const bool same_number_theirs = replaced && !newest && s->version == have && s->origin == origin;
    if (same_number_theirs || s->version > std::max(have, newest ? newest->version : 0)) newest = std::move(s).value();
  }
  if (!newest) {
    // Serving the newest version, but perhaps lacking shards no other node holds (a catch-up
    // while S3 could not be reached): held again over the durable copy, when it answers.
    if (v && restore_ && !v->origin().empty()) hold_again(v, copy_origins[{have, v->origin()}]);
    return false;
  }
  if (newest->version < at_least) return false;
  auto layout = ptc::Layout::make(newest->ptc, newest->ptc.parallelism);
  if (!layout) return false;
  StepPlacement placement;
  placement.nodes = newest->nodes;
  placement.gpus = newest->gpus;
  placement.held.assign(layout->shards().size(), false);
  // A step saved into the mounts is held where it was written, not where the ranks go: read
  // from those nodes (else every read here fails until the next repartition).
  if (!newest->holders.empty()) {
    if (newest->holders.size() != layout->shards().size()) {
      log::warn("catching up {}: the peer names holders of {} shards, the layout has {}", name, newest->holders.size(),
                layout->shards().size());
      return false;
    }
    placement.holders = newest->holders;
  }
  const size_t nshards = layout->shards().size();
  PreparedChange change(store_);
  change.replaced = v;
  change.origin = newest->origin;  // the version the others committed, under its own identity
  change.as_peers = true;          // (none when theirs has none: an older ptcfsd's)
  change.next = store_.new_version(job, step, newest->version, std::move(layout).value(),
                                   std::vector<std::vector<StoredSlice>>(nshards), std::move(placement));
  // The shards no other node holds, over the durable copy: asked before the claim (S3 may take a
  // while not to answer, and a change of the step meanwhile must not be refused for it).
  // Its blobs go with `change` if it does not commit.
  std::optional<Restoring> restored =
      restore_ && !newest->origin.empty()
          ? restore_shards(change, name, copy_origins[{newest->version, newest->origin}])
          : std::nullopt;
  if (auto s = change.claim(store_, v ? Claim::kChangeStep : Claim::kNewStep, job, step); !s) {
    log::warn("catching up {}: {}", name, s.to_string());
    return false;
  }
  // Planned against `v`: a commit since (this node's own part of the step, a kept change that
  // committed on its record while the peers were asked) is newer than anything caught up here,
  // and holds what this node wrote; replacing it would leave the node holding none of it.
  if (current_version(store_, job, step).value_or(nullptr) != v) {
    log::info("catching up {}: committed here meanwhile; nothing to catch up", name);
    return false;
  }
  if (!commit_restored(change, "catching up " + name, restored)) return false;
  // Only a save this node wrote names it a holder, and its own commit (or its kept prepared part,
  // on restart) brings those bytes: caught up here, it has none (but what its copy restored), and
  // reads of them fail.
  std::string lost;
  const std::string self = peers_.name_of(peers_.self());
  const StepPlacement& placed = change.next->placement();
  for (size_t s = 0; s < placed.holders.size(); ++s)
    if (!placed.holds(s) &&
        std::find(placed.holders[s].begin(), placed.holders[s].end(), self) != placed.holders[s].end())
      lost += (lost.empty() ? "" : ", ") + change.next->layout().shards()[s].name();
  if (replaced && newest->version == have && !restored) {
    // The durable record (the S3 tier's) was the old step's: the copy of this one is not known yet.
    WriteBatch b;
    b.del(Store::durable_key(job, step));
    if (auto s = store_.write_meta(b); !s) log::warn("catching up {}: {}", name, s.to_string());
  }
  if (restored)
    log_restored(name, newest->version, restored->shards);
  else if (replaced && newest->version == have)
    log::info(
        "{} was removed and saved again as version {} while this node was away; caught up (this node holds "
        "none of it)",
        name, have);
  else
    log::info("{} is at version {} on the other nodes; caught up (this node holds none of it)", name, newest->version);
  if (!lost.empty())
    log::error(
        "{} names this node a holder of {}, but it has none of those bytes (lost with a restart?); "
        "reads of them fail until the step is removed",
        name, lost);
  return true;
}

void Follower::hold_again(const std::shared_ptr<const StepVersion>& v, const std::string& copy_origin) {
  const std::string name = v->job() + "/" + v->step();
  PreparedChange change(store_);
  change.replaced = v;
  change.origin = v->origin();
  change.as_peers = true;
  change.next = store_.new_version(v->job(), v->step(), v->version(), v->layout(),
                                   std::vector<std::vector<StoredSlice>>(v->layout().shards().size()), v->placement());
  // Asked before the claim: S3 may take a while not to answer, and a change of the step meanwhile
  // (a repartition preparing here) must not be refused for it.
  std::optional<Restoring> restored = restore_shards(change, name, copy_origin, v.get());
  if (!restored) return;
  Status s = change.claim(store_, Claim::kChangeStep, v->job(), v->step());
  if (s && current_version(store_, v->job(), v->step()).value_or(nullptr) != v)
    s = error(Code::kFailedPrecondition, "it changed meanwhile");
  if (!s) log::info("holding {} again: {}; tried again later", name, s.to_string());
  if (!s || !commit_restored(change, "holding " + name + " again", restored)) {
    std::lock_guard lock(unrestored_mu_);  // (its blobs go with `change`)
    unrestored_.emplace(std::pair{v->job(), v->step()}, "not committed");
    return;
  }
  log_restored(name, v->version(), restored->shards);
}

bool Follower::commit_restored(PreparedChange& change, const std::string& what, std::optional<Restoring>& restored) {
  WriteBatch undo;
  if (restored) {
    auto u = restored->record();
    if (!u) {
      log::warn("{}: {}", what, u.status().to_string());
      return false;
    }
    undo = std::move(u).value();
  }
  if (auto s = commit_change(store_, change); !s) {
    log::warn("{}: {}", what, s.to_string());
    if (!undo.empty())
      if (auto u = store_.write_meta(undo); !u)
        log::warn("{}: undoing the records of the restore: {}", what, u.to_string());
    return false;
  }
  if (restored) restored->committed();
  return true;
}

bool Follower::note_restore(const std::pair<std::string, std::string>& key, const std::string& name,
                            std::chrono::steady_clock::time_point now, const Status& st) {
  std::lock_guard lock(unrestored_mu_);
  if (st) {
    unrestored_.erase(key);
    return true;
  }
  const std::string why = st.to_string();
  // S3 not answering (the tier's kUnavailable; the node's own faults come as other codes): the
  // other steps do not ask it until just before the next round.
  if (st.code() == Code::kUnavailable)
    s3_silent_until_ = std::chrono::steady_clock::now() + kRetryUnrestored - std::chrono::seconds(1);
  auto [it, fresh] = unrestored_.emplace(key, why);
  if (fresh) unrestored_tried_ = now;  // the next try in kRetryUnrestored
  if (fresh || it->second != why)      // said once, and again when the reason changes
    log::warn("{}: restoring the bytes no other node holds from its durable copy (tried again within {} s): {}", name,
              kRetryUnrestored.count(), why);
  it->second = why;
  return false;
}

std::optional<Follower::Restoring> Follower::restore_shards(PreparedChange& change, const std::string& name,
                                                            const std::string& copy_origin, const StepVersion* held) {
  const StepVersion& next = *change.next;
  const auto key = std::pair{next.job(), next.step()};
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(unrestored_mu_);
    // S3 did not answer a moment ago: this step waits for the next round (one silent S3 costs
    // about 20 s a round, not 20 s a step). Its reason, if it has one, stays.
    if (now < s3_silent_until_) {
      if (unrestored_.emplace(key, "S3 not answering").second)
        log::warn(
            "{}: restoring the bytes no other node holds from its durable copy: S3 did not answer another "
            "step's restore a moment ago; tried again within {} s",
            name, kRetryUnrestored.count());
      return std::nullopt;
    }
  }
  auto r = restore_(next, change.origin, copy_origin);
  if (!note_restore(key, name, now, r.status())) return std::nullopt;
  if (!*r) return std::nullopt;
  RestoredShards& got = **r;
  const auto& shards = next.layout().shards();
  const size_t nshards = shards.size();
  std::vector<std::vector<StoredSlice>> stored(nshards);
  StepPlacement placement = next.placement();
  if (placement.held.size() != nshards) placement.held.assign(nshards, !held);
  if (held)  // what this node holds of its current version stays
    for (size_t s = 0; s < nshards; ++s)
      if (held->holds(shards[s]))
        for (size_t j = 0; j < next.layout().slices(shards[s]).size(); ++j)
          stored[s].push_back(held->stored(shards[s], j));
  std::string names;
  for (auto& [s, slices] : got.stored) {
    stored.at(s) = std::move(slices);
    placement.held[s] = true;
    names += (names.empty() ? "" : ", ") + next.layout().shards()[s].name();
  }
  change.next = store_.new_version(next.job(), next.step(), next.version(), next.layout(), std::move(stored),
                                   std::move(placement));
  change.blobs = std::move(got.blobs);
  return Restoring{std::move(names), std::move(got.record), std::move(got.committed)};
}

void Follower::log_restored(const std::string& name, uint64_t version, const std::string& shards) {
  log::info(
      "{} version {}: no other node holds {}, and this node had none of it: held again over its durable copy in "
      "S3 (read from there on first use)",
      name, version, shards);
}

size_t Follower::catch_up(const std::function<bool()>& stopping) {
  size_t caught = 0;
  const auto snap = store_.snapshot();  // commits below publish new snapshots; this one stays valid
  for (const auto& [key, v] : snap->steps) {
    if (stopping && stopping()) return caught;
    if (!v->placement().nodes.empty() && catch_up_step(key.first, key.second, 0)) ++caught;
  }
  return caught + catch_up_datasets(stopping);
}

void Follower::behind() {
  behind_tries_ = 6;  // one now, then on the ticker's next ones: the others commit just after their record
  if (wake_) wake_();
}

void Follower::retry_unrestored(const std::function<bool()>& stopping) {
  std::vector<std::pair<std::string, std::string>> retry;
  {
    std::lock_guard lock(unrestored_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (unrestored_.empty() || now - unrestored_tried_ < kRetryUnrestored) return;
    unrestored_tried_ = now;
    for (const auto& [key, _] : unrestored_) retry.push_back(key);
  }
  for (const auto& [job, step] : retry) {
    if (stopping && stopping()) return;
    if (!current_version(store_, job, step)) {  // removed meanwhile
      std::lock_guard lock(unrestored_mu_);
      unrestored_.erase({job, step});
      continue;
    }
    catch_up_step(job, step, 0);  // no newer version: hold_again
  }
  std::lock_guard lock(unrestored_mu_);
  unrestored_tried_ = std::chrono::steady_clock::now();  // the next round kRetryUnrestored after this one ends
}

bool Follower::catch_up_if_behind(const std::function<bool()>& stopping) {
  retry_unrestored(stopping);
  int tries = behind_tries_.load();
  while (tries > 0 && !behind_tries_.compare_exchange_weak(tries, tries - 1)) {
  }
  if (tries <= 0) return false;
  // The nodes that took part commit at about the time a record appears: a few quick tries.
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto left = catch_up_records(stopping);
    if (left.empty() || (stopping && stopping())) break;
    if (attempt == 4) {
      log::warn("etcd records {} (and {} more), and no other node serves it yet; tried again on the next ticks",
                left.front().what(), left.size() - 1);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << attempt));
  }
  catch_up_datasets(stopping);  // a repartition's re-split of them has no record of its own
  return true;
}

void Follower::on_record(const KeyedRecord& rec) {
  ledger_.note(rec);
  const std::string& tx = rec.tx();
  if (!tx.empty() && local_.commit_decided(tx)) return;  // prepared here: the record is its commit
  // A change prepared here against what this record replaced can never commit now.
  local_.drop_superseded(rec.key, tx, rec.version(), rec.removed());
  const RecordMark m = mark_of(rec);
  if (!m.lags(served(m))) return;
  if (m.step && m.removed) {
    remove_recorded(m.job, m.name);  // local: at once
    return;
  }
  // A change this node did not commit (it missed it, or prepared it late): caught up on the
  // catch-up ticker (the watch thread goes on with later records). A step's record also brings
  // its job's datasets: a repartition re-splits them in its commit, under the step's record alone.
  behind();
}

ServedVersion Follower::served(const RecordMark& m) const {
  if (m.step) {
    auto v = current_version(store_, m.job, m.name);
    return v ? ServedVersion{(*v)->version(), (*v)->origin()} : ServedVersion{};
  }
  auto d = current_dataset(store_, m.job, m.name);
  return {d ? (*d)->version() : 0, {}};
}

void Follower::remove_recorded(const std::string& job, const std::string& step) {
  auto change = prepare_removal(store_, job, step);
  const Status s = change ? commit_change(store_, *change) : change.status();
  if (s)
    log::info("{}/{} was removed on the other nodes (etcd records it); removed here too", job, step);
  else
    log::warn("{}/{} is removed in etcd but not here: {}", job, step, s.to_string());
}

std::vector<RecordMark> Follower::catch_up_records(const std::function<bool()>& stopping) {
  const RecordLedger::Served served = [this](const RecordMark& m) { return this->served(m); };
  auto behind = ledger_.behind(served);
  if (behind.empty()) return behind;
  bool datasets = false;
  for (const auto& m : behind) {
    if (stopping && stopping()) return behind;
    if (!m.step)
      datasets = true;
    else if (m.removed)
      remove_recorded(m.job, m.name);
    else
      catch_up_step(m.job, m.name, m.version, m.tx);
  }
  if (datasets) catch_up_datasets(stopping);
  return ledger_.behind(served);
}

size_t Follower::catch_up_datasets(const std::function<bool()>& stopping) {
  const std::vector<int> peers = others();
  size_t caught = 0;
  const auto snap = store_.snapshot();
  for (const auto& [key, v] : snap->datasets) {
    if (stopping && stopping()) return caught;
    const std::string name = key.first + "/" + key.second;
    std::optional<DatasetState> newest;
    for (const auto& s : peers_.dataset_state(peers, DatasetStateRequest{key.first, key.second})) {
      if (!s || s->table_xxh3 != v->source().table_xxh3()) continue;
      if (s->version > (newest ? newest->version : v->version())) newest = *s;
    }
    if (!newest) continue;
    // A change of it prepared here and decided without this node (it prepared late, or missed
    // the word) would hold its claim until it expires: the others' version replaces it. Only
    // one held a while: a change whose commit is just now reaching the nodes is held here too.
    local_.drop_superseded(etcd_dataset_key(key.first, key.second), "", newest->version, false,
                           std::chrono::seconds(10));
    ptc::DatasetPosition pos;
    pos.dp = static_cast<int>(newest->dp);
    pos.epoch = newest->epoch;
    pos.consumed = newest->consumed;
    pos.batch_offset = newest->batch_offset;
    ptc::DatasetSpec spec = v->spec();
    if (newest->global_batch) spec.global_batch = newest->global_batch;
    if (!ptc::check_spec(spec) || !ptc::check_position(spec, pos)) continue;
    // Take the peers' version number, so later changes agree on it.
    PreparedChange change;
    change.datasets = {{v->with_position(pos, newest->version, spec.global_batch), v}};
    // Not under a change prepared here (a kept repartition that re-splits it commits it itself).
    if (auto s = change.claim_datasets(store_); !s) {
      log::warn("catching up dataset {}: {}; tried again later", name, s.to_string());
      continue;
    }
    if (auto s = commit_change(store_, change); !s) {
      log::warn("catching up dataset {}: {}", name, s.to_string());
      continue;
    }
    log::info("dataset {} moved to version {} while this node was down; caught up", name, newest->version);
    ++caught;
  }
  return caught;
}

}  // namespace ptcfs
