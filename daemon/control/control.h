// The control service: what `ptcfs` asks of a daemon (status, ls, import, repartition, the
// dataset requests), as JSON
// requests and results (docs/FORMATS.md lists them). Runs on the RPC server's workers.
//
// Thread-safety: handle() is called from many workers at once; changes of one step are
// serialized by the store's per-step claim (a concurrent change of the same step is refused
// with kFailedPrecondition). Errors come back to the client as the
// same Status (code and message), never as an exception.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include <optional>

#include "daemon/cluster/coordinator.h"
#include "daemon/reshard/compactor.h"
#include "daemon/dataset/dataset_ops.h"
#include "daemon/save/save_service.h"
#include "ptc/cluster.h"
#include "daemon/store/store.h"
#include "transport/rpc.h"

namespace ptcfs {

struct DaemonInfo {
  std::string data, mount, listen;
  std::string node;                          // with --cluster: this node's id
  std::optional<ptc::ClusterConfig> cluster;
};

class ControlService {
 public:
  // In a cluster (`coordinator` not null; it must outlive this object) imports,
  // repartitions and dataset changes go through the node's coordinator. Peer operations
  // ("peer.*") never come here: the transport routes them to the peer service.
  // `saves` (may be null) are the steps being saved through the mount: `ls` shows them and
  // `rm` removes them.
  ControlService(Store& store, DaemonInfo info, Coordinator* coordinator = nullptr, SaveService* saves = nullptr)
      : store_(store), info_(std::move(info)), coordinator_(coordinator), saves_(saves) {}
  void set_listen(std::string addr) { info_.listen = std::move(addr); }
  void set_compaction(CompactionPolicy p) { policy_ = p; }


  ptc::Result<transport::Reply> handle(const nlohmann::json& request, const transport::ProgressSink& progress);

 private:
  ptc::Result<nlohmann::json> status() const;
  ptc::Result<nlohmann::json> ls(const nlohmann::json& req) const;
  ptc::Result<nlohmann::json> rm(const nlohmann::json& req);
  ptc::Result<nlohmann::json> import(const nlohmann::json& req, const transport::ProgressSink& progress);
  // import with --format hf: a Hugging Face checkpoint and a PTC template, then --to.
  ptc::Result<nlohmann::json> import_hf(const nlohmann::json& req, const transport::ProgressSink& progress);
  ptc::Result<nlohmann::json> repartition(const nlohmann::json& req, const transport::ProgressSink& progress);
  // daemon/control/dataset.cc
  ptc::Result<DatasetAddRequest> parse_dataset_add(const nlohmann::json& req) const;
  ptc::Result<nlohmann::json> dataset_add(const nlohmann::json& req, const transport::ProgressSink& progress);
  ptc::Result<nlohmann::json> dataset_progress(const nlohmann::json& req);
  ptc::Result<nlohmann::json> dataset_ls(const nlohmann::json& req) const;

  Store& store_;
  DaemonInfo info_;
  CompactionPolicy policy_;
  Coordinator* coordinator_ = nullptr;
  SaveService* saves_ = nullptr;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace ptcfs
