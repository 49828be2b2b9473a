// Saving into the mount (docs/FORMATS.md "Saving into the mount"): the WriteTarget the
// filesystem passes mkdir, create, write and unlink to. It keeps the pending steps
// (daemon/save/pending_step.h) in memory: a step reserves its name in the store when made.
// It never commits on its own: when this node's part of a step is complete it wakes the node's
// save committer, which takes the ready steps (take_ready) and asks the node's ChangeRunner to
// commit each (daemon/change/runner.h), as every change is committed: the runner asks where the
// step stands (part_state), has the service prepare the version (prepare_part), commits it
// through the one commit path and tells the service (part_done). The
// commit runs on the committer's thread, never in a FUSE request handler (it refreshes the
// mount). Blobs of a pending step are pending in the blob store: a restart removes them and
// the step with them (never half-committed).
//
// Thread-safety: every method may be called concurrently.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/save/dcp_peers.h"
#include "daemon/save/dcp_save.h"
#include "daemon/save/pending_step.h"
#include "daemon/store/prepared.h"
#include "daemon/store/store.h"
#include "fs/content.h"

namespace ptcfs {

class SaveService final : public fs::WriteTarget {
 public:
  // `wake` is called when a step becomes ready to commit, or another node said one is
  // (note_ready); it is called from FUSE and RPC threads and must not block. `changed` is
  // called after a commit or a removal (the mount refreshes), from the thread that made it.
  // Both may be empty.
  SaveService(Store& store, std::function<void()> wake, std::function<void()> changed);
  ~SaveService() override;  // pending steps are dropped

  Status make_job(const std::string& job) override;
  Status make_step(const std::string& job, const std::string& step) override;
  Status make_dir(const std::string& job, const std::string& step, const std::string& rel) override;
  Result<std::shared_ptr<fs::WriteFile>> create(const std::string& job, const std::string& step,
                                                const std::string& rel) override;
  Status unlink(const std::string& job, const std::string& step, const std::string& rel) override;
  // .metadata.tmp to .metadata of a stock DCP save: converts it (daemon/save/dcp_save.h), so that
  // the step is complete and commits. A conversion that fails leaves the step pending and failed
  // (ls says why; remove it with ptcfs rm). And a stock save_pretrained's temporary to its
  // safetensors name (daemon/save/hf_save.h).
  Result<bool> rename(const std::string& job, const std::string& step, const std::string& from,
                      const std::string& to) override;

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
  Status remove(const std::string& job, const std::string& step);

  // The steps to look at for a commit since the last call: those that became ready here, and
  // those another node said are ready (on a cluster, the node that decides saves hears it).
  std::vector<std::pair<std::string, std::string>> take_ready();
  // Another node's part of job/step is complete (peer.save_ready): wakes the committer.
  void note_ready(const std::string& job, const std::string& step);

  // Where a step saved here stands: one node commits it once it is complete; a cluster once
  // every node's part is (daemon/cluster/coordinator.h).
  struct PartState {
    bool pending = false;  // this node has the step pending
    bool ready = false;    // and its part is complete
    bool whole = false;    // and every file of the step is here, checked by a pass over them
    uint64_t bytes = 0;    // of the step's tensors (0 until ptc.json is there)
    std::string ptc_text;  // canonical ptc.json, once written
    uint64_t ptc_digest = 0;
    std::vector<std::string> complete;  // shards written in full here
  };
  PartState part_state(const std::string& job, const std::string& step) const;
  // The pending steps whose part is complete here, still waiting for their commit (on a
  // cluster, the word to the deciding node may have been lost: it was down or restarted).
  std::vector<std::pair<std::string, std::string>> ready_parts() const;
  // This node's part as a change to commit, holding the shards `placement` says (empty: all,
  // one node); the step is committing (no more writes) until part_done.
  Result<PreparedChange> prepare_part(const std::string& job, const std::string& step, StepPlacement placement);
  // After the change committed (the pending step goes) or aborted (it stays pending: on a
  // cluster it is tried again when take_back first kept its blobs and name from the aborted
  // change; else it is failed, and ls says why).
  // `why`: the reason of an abort that trying again would not undo (the part then fails).
  void part_done(const std::string& job, const std::string& step, bool committed, const std::string& why = {});
  // An aborted change of this node's part: its blobs and the step's claim go back to the step
  // instead of going with the change.
  void take_back(const std::string& job, const std::string& step, PreparedChange& change);

  // A stock DCP save written through several nodes' mounts (daemon/save/dcp_peers.h). `peers`
  // (set once, before the mount serves; it must outlive this object) reaches the other nodes.
  void set_dcp_peers(DcpPeers* peers) { dcp_peers_ = peers; }
  // The files of job/step staged here, sealed (name -> size); nullopt when the step is not
  // pending here. From then on the step takes no more files: its .metadata landed elsewhere.
  Result<std::optional<std::map<std::string, uint64_t>>> staged_files(const std::string& job, const std::string& step);
  // `len` bytes at `off` of a file of job/step staged here (sealed), or of its .metadata.tmp.
  Result<std::string> read_staged(const std::string& job, const std::string& step, const std::string& file,
                                  uint64_t off, uint64_t len) const;
  // Converts this node's part: the shards `req` names it holder of, and ptc.json, which
  // completes the part (a failure leaves the step pending and failed, as here on one node).
  // A request whose `failed` is set fails this node's part instead, saying why.
  Status convert_part(const DcpConvertRequest& req);

 private:
  std::shared_ptr<PendingStep> find(const std::string& job, const std::string& step) const;
  void closed(const std::shared_ptr<PendingStep>& step);
  bool ready(const PendingStep& step) const PTC_REQUIRES(step.mu);
  Result<std::shared_ptr<fs::WriteFile>> create_staged(const std::shared_ptr<PendingStep>& s, const std::string& rel,
                                                       const std::string& where);
  // Writes a stock DCP save's tensor files (all, or on a cluster this node's shards, with
  // `peers` the other nodes that convert theirs); what ptc.json then says.
  Result<DcpSave> convert_dcp(const std::shared_ptr<PendingStep>& s, std::vector<std::string>& peers);
  Status convert_part(const std::shared_ptr<PendingStep>& s, const DcpConvertRequest& req);
  // After a stock save's conversion (`save`, or why it failed): its staged files go, ptc.json is
  // written, and the step's commit is waited for; a failure leaves the step pending and failed,
  // `what` and the reason in ls.
  Status commit_converted(const std::shared_ptr<PendingStep>& s, const std::string& what, const Result<DcpSave>& save);
  // A stock save_pretrained (daemon/save/hf_save.h): the rename of a temporary to its
  // safetensors name, a close of one of its files (the last one converts the save and waits for
  // its commit), and the conversion.
  Status rename_hf(const std::string& job, const std::string& step, const std::string& from, const std::string& to);
  Status hf_closed(const std::shared_ptr<PendingStep>& s);
  Result<DcpSave> convert_hf(const std::shared_ptr<PendingStep>& s);
  // Until the step is committed in the store, its commit failed, or it was removed.
  Status wait_committed(const std::shared_ptr<PendingStep>& s) const;
  Result<PreparedChange> build_change(const std::shared_ptr<PendingStep>& step, StepPlacement placement);
  void forget(const std::string& job, const std::string& step);
  void changed();

  Store& store_;
  const std::function<void()> wake_, changed_;
  DcpPeers* dcp_peers_ = nullptr;
  mutable std::mutex mu_;  // guards steps_, jobs_, ready_
  std::map<std::pair<std::string, std::string>, std::shared_ptr<PendingStep>> steps_;
  std::set<std::string> jobs_;
  std::set<std::pair<std::string, std::string>> ready_;  // to look at (take_ready)
};

}  // namespace ptcfs
