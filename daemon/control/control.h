// The control service: what `ptcfs` asks of a daemon (status, ls, rm, import, repartition, the
// dataset requests), as JSON requests and results (docs/FORMATS.md "Control protocol"). It
// parses each request into the typed request of the node's ChangeRunner
// (daemon/change/runner.h), which is the same call on one node and on a cluster, and prints the
// typed result (daemon/control/results.h). Peer operations ("peer.*") never come here: the
// transport routes them to the peer service.
//
// Thread-safety: handle() is called from many RPC workers at once; changes of one step are
// serialized by the store's per-step claim (a concurrent change of the same step is refused
// with kFailedPrecondition). Errors come back to the client as the same Status (code and
// message), never as an exception.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/change/runner.h"
#include "daemon/durable/durable_tier.h"
#include "daemon/reshard/source_dir.h"
#include "daemon/save/save_service.h"
#include "daemon/store/store.h"
#include "transport/rpc.h"

namespace ptcfs {

struct DaemonInfo {
  std::string data, mount;
  std::string listen;  // the address the control server is bound to
};

class ControlService {
 public:
  // Everything given must outlive this object. `saves` are the steps being saved through the
  // mount: `ls` shows them and `rm` removes them. `tier` (may be null): the write-through S3
  // tier, whose state of each step `ls` shows. `sources` (null: local folders only): where a DCP
  // import reads from (an import of another format reads through the runner's).
  ControlService(Store& store, ChangeRunner& runner, SaveService& saves, DaemonInfo info,
                 const durable::DurableTier* tier = nullptr, const SourceDirs* sources = nullptr)
      : store_(store),
        runner_(runner),
        saves_(saves),
        info_(std::move(info)),
        tier_(tier),
        sources_(sources ? *sources : kLocalSources) {}

  Result<transport::Reply> handle(const nlohmann::json& request, const transport::ProgressSink& progress);

 private:
  Result<nlohmann::json> status() const;
  Result<nlohmann::json> ls(const nlohmann::json& req) const;
  Result<nlohmann::json> rm(const nlohmann::json& req);
  Result<nlohmann::json> import(const nlohmann::json& req, const transport::ProgressSink& progress);
  // --format dcp: a stock DCP folder through the save path (daemon/save/dcp_import.h).
  Result<ImportResult> import_dcp(const ImportRequest& r, const PhaseProgress& progress);
  Result<nlohmann::json> repartition(const nlohmann::json& req, const transport::ProgressSink& progress);
  // daemon/control/dataset.cc
  Result<DatasetAddRequest> parse_dataset_add(const nlohmann::json& req) const;
  Result<nlohmann::json> dataset_add(const nlohmann::json& req, const transport::ProgressSink& progress);
  Result<nlohmann::json> dataset_progress(const nlohmann::json& req);
  Result<nlohmann::json> dataset_ls(const nlohmann::json& req) const;

  Store& store_;
  ChangeRunner& runner_;
  SaveService& saves_;
  const DaemonInfo info_;
  const durable::DurableTier* tier_;
  const SourceDirs& sources_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace ptcfs
