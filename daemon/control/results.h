// The JSON the CLI gets back for each typed result of a change (docs/FORMATS.md "Control
// protocol"): the control service's wire format, written in one place.
#pragma once

#include <nlohmann/json.hpp>

#include "daemon/change/runner.h"
#include "daemon/durable/durable_tier.h"

namespace ptcfs {

nlohmann::json to_json(const ImportResult& r);
nlohmann::json to_json(const RepartitionResult& r);
// `ptcfs ls JOB/STEP`: a step's version, parallelism, tensors, bytes and shards.
nlohmann::json step_json(const StepVersion& v);
// A dataset version's state, as in its state.json, with its job and name (`ptcfs dataset ...`).
nlohmann::json dataset_json(const DatasetVersion& v);
nlohmann::json to_json(const DatasetAddResult& r);
// A step's durable copy as `ls JOB/STEP --json` shows it (without "where", the control service's).
nlohmann::json to_json(const durable::StepDurability& d);
// The "node" and "cluster" members of `ptcfs status` on a cluster (nothing on one node), and
// this node's byte counters.
void add_status(const RunnerStatus& s, nlohmann::json& out);

}  // namespace ptcfs
