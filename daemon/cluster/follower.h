// The follower: the half of a cluster node that takes what the others committed without it
// (docs/ARCHITECTURE.md "What holds under faults"). The coordinator (daemon/cluster/coordinator.h)
// makes changes; the follower applies etcd's records as the watch delivers them and catches a
// node up after a restart or a time away:
//
// - on_record, on the watch thread: a record that decides a change prepared here commits it; a
//   change prepared here that a record passed is dropped; a removal is applied. Anything else
//   this node is behind on wakes the catch-up ticker (no peer is asked on the watch thread, so
//   later records never queue behind a slow peer).
// - catch_up_records: brings the node to every record it is behind on (RecordLedger), asking
//   peers for the versions they serve. The node serves its mount once nothing is left.
// - catch_up (after a restart, and every 10 s on a static cluster, where there are no records):
//   every step to the newest version its peers serve, every dataset to the newest position.
//
// Thread-safety: all methods may be called concurrently (the watch, the tickers, the node's
// start); two catch-ups of one step or dataset meet at its claim, and the second tries later.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/peer_client.h"
#include "daemon/cluster/participant.h"
#include "daemon/cluster/record_ledger.h"
#include "daemon/store/store.h"

namespace ptcfs {

class Follower {
 public:
  // Everything must outlive this object; `peers` asks the other nodes what they serve, `local`
  // holds this node's prepared changes, `members` says who the others are. `wake` (may be empty)
  // is called when on_record finds this node behind: it wakes the node's catch-up ticker.
  Follower(Store& store, PeerClient& peers, Participant& local, Membership& members, std::function<void()> wake)
      : store_(store), peers_(peers), local_(local), members_(members), wake_(std::move(wake)) {}

  // Shards a caught-up version names this node the only holder of, restored over the S3 tier's
  // durable copy (docs/OPERATIONS.md "A node that lost its data directory"): per shard index,
  // its slices; `blobs` are evicted and pending. Nothing is written until `record` (under the
  // step's claim, just before the commit), which gives the batch putting the metadata back as it
  // was, for a commit that fails; `committed` runs after the commit.
  struct RestoredShards {
    std::map<size_t, std::vector<StoredSlice>> stored;
    std::vector<uint64_t> blobs;
    std::function<Result<WriteBatch>()> record;
    std::function<void()> committed;
  };
  // Given the version about to be committed (holding nothing), its origin, and the origin of the
  // version its durable copy is of by the peers' word (StepState::copy_origin; may be empty):
  // nullopt when there is nothing to restore; an error (tried again every 15 s) when there is but
  // it cannot be now: S3 not answering (kUnavailable), no whole copy of those tensors yet.
  using RestoreFn = std::function<Result<std::optional<RestoredShards>>(
      const StepVersion& next, const std::string& origin, const std::string& copy_origin)>;
  // Set once, before the first catch-up (with the S3 tier only).
  void set_restore(RestoreFn restore) { restore_ = std::move(restore); }

  // A record written in etcd (EtcdMembership's watch; on start, every record there is).
  void on_record(const KeyedRecord& record);
  // On the catch-up ticker: after on_record found this node behind, a few of its next ticks
  // catch up on the records and the datasets (the others may commit just after their record
  // appears). Whether one was made. First, every 15 s, it tries again the steps whose restore
  // from the durable copy failed (set_restore).
  bool catch_up_if_behind(const std::function<bool()>& stopping = {});
  // Brings this node to every record the watch delivered that it is behind on (a step at an
  // older version or missing, a step removed, a dataset's older position); what it is still
  // behind on.
  std::vector<RecordMark> catch_up_records(const std::function<bool()>& stopping = {});
  // Every step placed on nodes to the newest version its peers serve (holding none of it; its
  // old blobs are then collected), every dataset to the newest position. How many moved.
  // `stopping` (may be empty) ends it early, between one step or dataset and the next.
  size_t catch_up(const std::function<bool()>& stopping = {});
  size_t catch_up_datasets(const std::function<bool()>& stopping = {});

 private:
  std::vector<int> others() const;
  ServedVersion served(const RecordMark& m) const;  // what this node serves of it
  // Brings job/step to the newest version its peers have (at least `at_least`), holding none
  // of it; whether it moved. `origin` (may be empty): the origin etcd's record names; a peer
  // serving it replaces a version of the same number and another origin.
  bool catch_up_step(const std::string& job, const std::string& step, uint64_t at_least,
                     const std::string& origin = {});
  bool catch_up_step_alone(const std::string& job, const std::string& step, uint64_t at_least,
                           const std::string& origin);
  void remove_recorded(const std::string& job, const std::string& step);  // etcd records it removed
  void behind();                                                          // tries counted afresh, the ticker woken
  // What restore_shards found: the shards' names, and RestoredShards' record and committed.
  struct Restoring {
    std::string shards;
    std::function<Result<WriteBatch>()> record;
    std::function<void()> committed;
  };
  // Asks restore_ for change.next and rebuilds it holding those shards (and, with `held`, what
  // that version holds); nullopt when nothing was restored.
  std::optional<Restoring> restore_shards(PreparedChange& change, const std::string& name,
                                          const std::string& copy_origin, const StepVersion* held = nullptr);
  // Under the step's claim, the current version still the one planned against: writes the
  // restore's records and commits `change`; whether it committed (the log says why not).
  bool commit_restored(PreparedChange& change, const std::string& name, std::optional<Restoring>& restored);
  // Notes a restore's outcome for the retries: false when it failed (said in the log once per reason).
  bool note_restore(const std::pair<std::string, std::string>& key, const std::string& name,
                    std::chrono::steady_clock::time_point now, const Status& st);
  static void log_restored(const std::string& name, uint64_t version, const std::string& shards);
  // v, the newest version, again, holding what restore_ finds of the shards it lacks.
  void hold_again(const std::shared_ptr<const StepVersion>& v, const std::string& copy_origin);
  void retry_unrestored(const std::function<bool()>& stopping);

  Store& store_;
  PeerClient& peers_;
  Participant& local_;
  Membership& members_;
  const std::function<void()> wake_;
  std::atomic<int> behind_tries_{0};
  RecordLedger ledger_;  // the newest record of each key the watch delivered
  RestoreFn restore_;
  // Steps whose restore failed (S3 not answering, a damaged manifest): tried again on the
  // catch-up ticker every kRetryUnrestored.
  std::mutex unrestored_mu_;
  std::map<std::pair<std::string, std::string>, std::string> unrestored_;  // -> why (logged when it changes)
  std::chrono::steady_clock::time_point unrestored_tried_{};
  std::chrono::steady_clock::time_point s3_silent_until_{};  // a restore found S3 not answering
  // One catch-up of a step at a time: another one (the start's, the records', the ticker's)
  // leaves it to the one under way, which may wait on S3 for a while, and is tried again later.
  std::mutex catching_mu_;
  std::set<std::pair<std::string, std::string>> catching_;
};

}  // namespace ptcfs
