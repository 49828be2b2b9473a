// The records nodes exchange about a change: what each node answers to peer.prepare (the
// request and the kinds of change it carries are daemon/cluster/changes/change_kinds.h), what a
// node reports of its state, and every other peer request (state, commit or abort, a save's
// part, counters). Each request's encoder writes its "op"; the peer service dispatches on it. One typed struct per
// record and one JSON codec for each, so a field is written in one place and read in one place; decoding never throws
// and names the member at fault (docs/FORMATS.md "Data frames and peer operations" lists the fields).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"
#include "ptc/model.h"

namespace ptcfs {

// The PTC held as the object `key` of a record (a request's or a reply's), parsed and checked.
Result<ptc::Ptc> ptc_member(const nlohmann::json& j, const char* key, const std::string& where);

// What a node answers to peer.prepare (fields of the other kinds stay 0).
struct PrepareReply {
  uint64_t shards = 0, bytes = 0, ptc_digest = 0;  // an import
  uint64_t tensors = 0;                            // an import: the tensors of its ptc.json
  uint64_t bytes_received = 0;                     // a repartition
  std::map<std::string, uint64_t> shard_digests;   // a save: per shard held, a digest of its slices' XXH3s
};
nlohmann::json to_json(const PrepareReply& r);
Result<PrepareReply> prepare_reply_from_json(const nlohmann::json& j, const std::string& where);

// peer.state: this node's current version of a step.
struct StepState {
  uint64_t version = 0;
  std::vector<std::string> nodes;  // the placement
  std::vector<int> gpus;           // their GPUs when it was made (empty: not pinned)
  std::vector<std::string> held;   // shards this node holds
  ptc::Ptc ptc;
  // Per shard, the nodes holding it when not the rank placement's (a step saved into the
  // mounts: where it was written); empty otherwise. A node catching up must read from them.
  std::vector<std::vector<std::string>> holders{};
  std::string origin{};  // StepVersion::origin; empty from a peer that does not send it
  // The origin of the version its S3 tier's durable copy is of, when that node knows the copy
  // whole (a repartition keeps it: the same tensors at the copy's layout); empty otherwise.
  std::string copy_origin{};
};
nlohmann::json to_json(const StepState& s);
Result<StepState> step_state_from_json(const nlohmann::json& j, const std::string& where);

// peer.dataset_state: this node's current version of a dataset.
struct DatasetState {
  uint64_t version = 0, dp = 1, epoch = 0, consumed = 0, table_xxh3 = 0;
  uint64_t global_batch = 0, batch_offset = 0;  // global_batch 0: a peer that does not send it (the dataset's own)
};
nlohmann::json to_json(const DatasetState& s);
Result<DatasetState> dataset_state_from_json(const nlohmann::json& j, const std::string& where);

// peer.save_state: this node's part of a step being saved.
struct SaveState {
  bool pending = false, ready = false;
  uint64_t ptc_digest = 0;
  std::optional<ptc::Ptc> ptc;        // once its ptc.json is written
  std::vector<std::string> complete;  // shards written in full here
};
nlohmann::json to_json(const SaveState& s);
Result<SaveState> save_state_from_json(const nlohmann::json& j, const std::string& where);

// peer.stats.
struct PeerStats {
  uint64_t bytes_sent = 0, bytes_received = 0;
};
nlohmann::json to_json(const PeerStats& s);
Result<PeerStats> peer_stats_from_json(const nlohmann::json& j, const std::string& where);

// The other peer requests, one struct each (their encoders write the "op"; decoders refuse
// unknown members and name the one at fault).

// peer.state: this node's version of a step (answered with StepState; kNotFound: none).
struct StateRequest {
  std::string job, step;
};
nlohmann::json to_json(const StateRequest& r);
Result<StateRequest> state_request_from_json(const nlohmann::json& j);

// peer.commit (commit) or peer.abort: the end of transaction `tx` (answered with {}).
struct FinishRequest {
  std::string tx;
  bool commit = false;
  // An abort that trying the change again would not undo (the coordinator's check refused what
  // the nodes prepared): why, for the nodes to keep (a save's part is then failed, not tried again).
  // Empty: the change may be tried again ("why" absent in the JSON).
  std::string why;
};
nlohmann::json to_json(const FinishRequest& r);
// `commit` says which of the two ops `j` came as.
Result<FinishRequest> finish_request_from_json(const nlohmann::json& j, bool commit);

// peer.save_state: this node's part of a step saved into the mounts (answered with SaveState).
struct SaveStateRequest {
  std::string job, step;
};
nlohmann::json to_json(const SaveStateRequest& r);
Result<SaveStateRequest> save_state_request_from_json(const nlohmann::json& j);

// peer.save_ready: the sender's part of job/step is complete; to the node that decides saves
// (answered with {}).
struct SaveReadyRequest {
  std::string job, step;
};
nlohmann::json to_json(const SaveReadyRequest& r);
Result<SaveReadyRequest> save_ready_request_from_json(const nlohmann::json& j);

// peer.dataset_state: this node's version of a dataset (answered with DatasetState).
struct DatasetStateRequest {
  std::string job, name;
};
nlohmann::json to_json(const DatasetStateRequest& r);
Result<DatasetStateRequest> dataset_state_request_from_json(const nlohmann::json& j);

// peer.stats: the node's byte counters (answered with PeerStats).
struct StatsRequest {};
nlohmann::json to_json(const StatsRequest& r);
Result<StatsRequest> stats_request_from_json(const nlohmann::json& j);

// peer.dataset_table: bytes [off, off + n) of the sample table of the dataset add prepared
// under `tx` on its home node (answered with {"size"} and the bytes).
struct DatasetTableRequest {
  std::string tx;
  uint64_t off = 0, n = 0;
};
nlohmann::json to_json(const DatasetTableRequest& r);
Result<DatasetTableRequest> dataset_table_request_from_json(const nlohmann::json& j);

// peer.samples: bytes of samples of a dataset held by its home node (answered with {"xxh3"}
// and the bytes); `from` is the asking node's id (for the metrics).
struct SamplesRequest {
  struct Piece {
    uint64_t sample = 0, off = 0, len = 0;
  };
  std::string from, job, name;
  uint64_t table_xxh3 = 0;
  std::vector<Piece> pieces;
};
nlohmann::json to_json(const SamplesRequest& r);
Result<SamplesRequest> samples_request_from_json(const nlohmann::json& j);

// peer.read: bytes [off, off + n) of the slab [lo, lo + len) (along the slab dimension) of a
// slice of version `version` of job/step, row by row (answered with {"xxh3"} and the bytes,
// daemon/cluster/slab_read.h); `from` is the asking node's id (for the metrics).
struct ReadRequest {
  std::string from, job, step, shard, tensor;
  uint64_t version = 0, lo = 0, len = 0, off = 0, n = 0;
  // A read for the asking node's mount: the server holds the version for a while after it
  // (daemon/cluster/read_leases.h), so that a file open there reads on after a change. A
  // repartition's own pulls do not ("hold" absent in the JSON).
  bool hold = false;
};
nlohmann::json to_json(const ReadRequest& r);
Result<ReadRequest> read_request_from_json(const nlohmann::json& j);

}  // namespace ptcfs
