// The ChangeRunner of a node that is in no cluster (daemon/change/runner.h): each change is
// prepared and committed here through the one commit path (daemon/store/prepared.h), and
// `--nodes` is refused (there are no other nodes to place ranks on).
//
// Thread-safety: as ChangeRunner. Everything given must outlive the runner.
#pragma once

#include "daemon/change/runner.h"
#include "daemon/reshard/compactor.h"
#include "daemon/reshard/source_dir.h"
#include "daemon/save/save_service.h"
#include "daemon/store/store.h"

namespace ptcfs {

class LocalRunner final : public ChangeRunner {
 public:
  LocalRunner(Store& store, SaveService& saves, CompactionPolicy policy, const SourceDirs& sources = kLocalSources)
      : store_(store), saves_(saves), policy_(policy), sources_(sources) {}

  Result<ImportResult> import(const ImportRequest& req, const PhaseProgress& progress) override;
  Result<RepartitionResult> repartition(const RepartitionRequest& req, const PhaseProgress& progress) override;
  Status remove(const RemoveRequest& req) override;
  Result<DatasetAddResult> dataset_add(const DatasetAddRequest& req, const PhaseProgress& progress) override;
  Result<std::shared_ptr<const DatasetVersion>> dataset_progress(const DatasetProgressRequest& req) override;
  Status save_commit(const SaveCommitRequest& req) override;
  RunnerStatus status() override { return RunnerStatus{}; }

 private:
  // With req.then (`--to`): the new step repartitioned into it; `imported_at` names the layout it
  // was imported in, for the error.
  Status then_repartition(const ImportRequest& req, const std::string& imported_at, ImportResult& r,
                          const PhaseProgress& progress);
  Result<ImportResult> import_hf(const ImportRequest& req, const PhaseProgress& progress);

  Store& store_;
  SaveService& saves_;
  const CompactionPolicy policy_;
  const SourceDirs& sources_;  // where imports read from
};

}  // namespace ptcfs
