// Saving into the mount, on one node (docs/FORMATS.md "Saving into the mount"): the WriteTarget
// the filesystem passes mkdir, create, write and unlink to. It keeps the pending steps
// (daemon/save/pending_step.h) in memory: a step reserves its name in the store when made,
// and commits through the one commit path (daemon/store/prepared.h) as version 1 once it is
// complete, on its own thread (a commit refreshes the mount, which a FUSE request handler
// must not do). Blobs of a pending step are pending in the blob store: a restart removes
// them and the step with them (never half-committed).
//
// Thread-safety: every method may be called concurrently.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/save/pending_step.h"
#include "daemon/store/prepared.h"
#include "daemon/store/store.h"
#include "fs/content.h"

namespace ptcfs {

class SaveService final : public fs::WriteTarget {
 public:
  explicit SaveService(Store& store);
  ~SaveService() override;  // stops the commit thread; pending steps are dropped

  ptc::Status make_job(const std::string& job) override;
  ptc::Status make_step(const std::string& job, const std::string& step) override;
  ptc::Status make_dir(const std::string& job, const std::string& step, const std::string& rel) override;
  ptc::Result<std::shared_ptr<fs::WriteFile>> create(const std::string& job, const std::string& step,
                                                     const std::string& rel) override;
  ptc::Status unlink(const std::string& job, const std::string& step, const std::string& rel) override;

  // What the mount shows besides the store: pending steps and jobs made by mkdir.
  void add_to(fs::Contents& contents) const;

  struct Progress {
    std::string job, step;
    uint64_t bytes_written = 0, bytes_total = 0;  // total: 0 until ptc.json is there
    size_t files = 0;
    std::vector<std::string> errors;  // files that contradict ptc.json or themselves, a failed commit
  };
  std::optional<Progress> progress(const std::string& job, const std::string& step) const;
  std::vector<Progress> pending() const;
  // Jobs made by mkdir (whether they have steps yet or not).
  std::vector<std::string> jobs() const;

  // Removes a pending step: its files go (a writer still at it gets errors), its name is free.
  // kNotFound when there is no such pending step.
  ptc::Status remove(const std::string& job, const std::string& step);

  // Called after a commit or a removal (the mount refreshes), from the service's threads.
  void on_change(std::function<void()> fn);

  // In a cluster the step commits on every node together (daemon/cluster/coordinator.h):
  // `part_ready(job, step)` is called, on the service's thread, when this node's part of a
  // pending step is complete, instead of committing it here.
  void set_cluster(std::function<void(const std::string& job, const std::string& step)> part_ready);
  struct PartState {
    bool pending = false;  // this node has the step pending
    bool ready = false;    // and its part is complete
    std::string ptc_text;  // canonical ptc.json, once written
    uint64_t ptc_digest = 0;
    std::vector<std::string> complete;  // shards written in full here
  };
  PartState part_state(const std::string& job, const std::string& step) const;
  // The pending steps whose part here is complete, waiting for the cluster's commit (their
  // word to the coordinator may have been lost: it was down or restarted).
  std::vector<std::pair<std::string, std::string>> ready_parts() const;
  // This node's part as a change to commit, holding the shards `placement` says; the step is
  // committing (no more writes) until part_done.
  ptc::Result<PreparedChange> prepare_part(const std::string& job, const std::string& step, StepPlacement placement);
  // After the cluster committed (the pending step goes) or aborted (it stays, failed: remove it).
  void part_done(const std::string& job, const std::string& step, bool committed);
  // Another node's part of job/step is complete (its peer.save_ready): noted here, and taken
  // by the node's ticker, which asks the cluster to commit the step (ChangeRunner::save_commit).
  void note_ready(const std::string& job, const std::string& step);
  // The steps noted since the last call, each once.
  std::vector<std::pair<std::string, std::string>> take_noted();

 private:
  std::shared_ptr<PendingStep> find(const std::string& job, const std::string& step) const;
  void closed(const std::shared_ptr<PendingStep>& step);
  void run();
  void commit(const std::shared_ptr<PendingStep>& step);
  ptc::Result<PreparedChange> build_change(const std::shared_ptr<PendingStep>& step, StepPlacement placement);
  void forget(const std::string& job, const std::string& step);
  void changed();

  Store& store_;
  mutable std::mutex mu_;  // guards steps_, jobs_, queue_, listeners_, stopping_
  std::map<std::pair<std::string, std::string>, std::shared_ptr<PendingStep>> steps_;
  std::set<std::string> jobs_;
  std::deque<std::shared_ptr<PendingStep>> queue_;  // steps to commit
  std::vector<std::function<void()>> listeners_;
  bool stopping_ = false;
  std::function<void(const std::string&, const std::string&)> part_ready_;  // set in a cluster
  std::mutex noted_mu_;  // guards noted_
  std::set<std::pair<std::string, std::string>> noted_;  // note_ready's steps, until take_noted
  std::condition_variable cv_;
  std::thread worker_;
};

}  // namespace ptcfs
