#include "daemon/store/prepared_record.h"

#include "daemon/store/memory_kv.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"

namespace ptcfs {

using nlohmann::json;

namespace {

std::string record_key(const std::string& tx) { return std::string(Store::kPreparedPrefix) + tx; }

// The puts of a batch as one JSON object (key -> value).
json puts_of(const WriteBatch& batch) {
  json out = json::object();
  for (const auto& [key, value] : batch.ops())
    if (value) out[key] = *value;
  return out;
}

void remove_blobs(Store& store, const std::vector<uint64_t>& blobs) {
  for (uint64_t id : blobs) {
    if (auto s = store.blobs().remove(id); !s) log::warn("removing a blob of a dropped change: {}", s.to_string());
    store.blobs().settle(id);
  }
}

// The current version number of a step and of a dataset (0: none).
uint64_t step_at(const Snapshot& snap, const std::string& job, const std::string& step) {
  auto it = snap.steps.find({job, step});
  return it == snap.steps.end() ? 0 : it->second->version();
}

// Rebuilds a change from its record. kFailedPrecondition: its base moved on; kAlreadyExists:
// it is committed already.
Result<PreparedChange> rebuild(Store& store, const Snapshot& snap, const json& rec, const std::string& where) {
  PTC_RETURN_IF_ERROR(
      check_members(rec, {"about", "job", "step", "replaced", "removes_step", "next", "datasets", "blobs"}, where));
  PTC_ASSIGN_OR_RETURN(const std::string job, member_string_or(rec, "job", "", where));
  PTC_ASSIGN_OR_RETURN(const std::string step, member_string_or(rec, "step", "", where));
  PTC_ASSIGN_OR_RETURN(const uint64_t replaced, member_u64_or(rec, "replaced", 0, where));
  PTC_ASSIGN_OR_RETURN(const bool removes, member_bool_or(rec, "removes_step", false, where));
  PreparedChange c(store);
  c.removes_step = removes;
  c.kept = true;
  // Its blobs join the change last: a change dropped before (committed already, or its base
  // moved on) must not remove them on its way out; restore_prepared decides what they become.
  std::vector<uint64_t> blobs;
  if (rec.contains("blobs")) {
    if (!rec["blobs"].is_array()) return corrupt(where + ": 'blobs' is not a list");
    for (const auto& b : rec["blobs"]) {
      if (!b.is_number_unsigned()) return corrupt(where + ": a blob id is not a number");
      blobs.push_back(b.get<uint64_t>());
    }
  }
  const uint64_t current = step.empty() ? 0 : step_at(snap, job, step);
  if (rec.contains("next")) {
    const json& next = rec["next"];
    if (!next.is_object()) return corrupt(where + ": 'next' is not an object");
    MemoryKv kv;
    WriteBatch batch;
    for (const auto& [key, value] : next.items()) {
      if (!value.is_string()) return corrupt(where + ": record " + key + " is not a string");
      batch.put(key, value.get<std::string>());
    }
    PTC_RETURN_IF_ERROR(kv.write(batch));
    PTC_ASSIGN_OR_RETURN(const auto step_rec, kv.get(StepVersion::meta_key(job, step)));
    if (!step_rec) return corrupt(where + ": no step record of " + job + "/" + step);
    PTC_ASSIGN_OR_RETURN(c.next, StepVersion::load(kv, job, step, *step_rec, &store.blobs(), store.remote()));
    if (current == c.next->version()) return error(Code::kAlreadyExists, "committed");
  }
  if (!step.empty() && current != replaced)
    return error(Code::kFailedPrecondition,
                 job + "/" + step + (current ? " is at version " + std::to_string(current) : " is not here") +
                     ", the change was prepared against " +
                     (replaced ? "version " + std::to_string(replaced) : "no version (an import)"));
  if (replaced) c.replaced = snap.steps.at({job, step});
  if (rec.contains("datasets")) {
    if (!rec["datasets"].is_array()) return corrupt(where + ": 'datasets' is not a list");
    for (const auto& d : rec["datasets"]) {
      PTC_ASSIGN_OR_RETURN(const std::string djob, member_string(d, "job", where + ": dataset"));
      PTC_ASSIGN_OR_RETURN(const std::string name, member_string(d, "name", where + ": dataset"));
      PTC_ASSIGN_OR_RETURN(const uint64_t dreplaced, member_u64_or(d, "replaced", 0, where + ": dataset"));
      PTC_ASSIGN_OR_RETURN(const std::string record, member_string(d, "record", where + ": dataset"));
      DatasetChange dc;
      PTC_ASSIGN_OR_RETURN(auto next, DatasetVersion::load(djob, name, record, store.blobs(), store.remote_samples()));
      dc.next = std::move(next);
      auto it = snap.datasets.find({djob, name});
      const uint64_t dcurrent = it == snap.datasets.end() ? 0 : it->second->version();
      if (step.empty() && dcurrent == dc.next->version()) return error(Code::kAlreadyExists, "committed");
      if (dcurrent != dreplaced)
        return error(Code::kFailedPrecondition, "dataset " + djob + "/" + name + " is at version " +
                                                    std::to_string(dcurrent) +
                                                    ", the change was prepared "
                                                    "against " +
                                                    std::to_string(dreplaced));
      if (dreplaced) dc.replaced = it->second;
      c.datasets.push_back(std::move(dc));
    }
  }
  // Claim the step as the change did before the restart.
  if (c.removes_step || (c.next && c.replaced)) {
    PTC_RETURN_IF_ERROR(c.claim(store, Claim::kChangeStep, job, step));
  } else if (c.next) {
    PTC_RETURN_IF_ERROR(c.claim(store, Claim::kNewStep, job, step));
  }
  PTC_RETURN_IF_ERROR(c.claim_datasets(store));
  c.blobs = std::move(blobs);
  return c;
}

}  // namespace

bool can_keep(const PreparedChange& c) { return !c.claims_new_dataset(); }

Status keep_prepared(Store& store, const std::string& tx, PreparedChange& c, const json& about) {
  json rec = {{"about", about}, {"removes_step", c.removes_step}, {"blobs", c.blobs}};
  const StepVersion* step = c.next ? c.next.get() : c.replaced.get();
  if (step) {
    rec["job"] = step->job();
    rec["step"] = step->step();
  }
  if (c.replaced) rec["replaced"] = c.replaced->version();
  if (c.next) {
    WriteBatch batch;
    c.next->to_records(batch);
    rec["next"] = puts_of(batch);
  }
  json datasets = json::array();
  for (const auto& d : c.datasets) {
    json dj = {{"job", d.next->job()}, {"name", d.next->name()}, {"record", d.next->to_json().dump()}};
    if (d.replaced) dj["replaced"] = d.replaced->version();
    datasets.push_back(std::move(dj));
  }
  if (!datasets.empty()) rec["datasets"] = std::move(datasets);
  WriteBatch batch;
  batch.put(record_key(tx), rec.dump());
  PTC_RETURN_IF_ERROR(store.write_meta(batch));
  c.kept = true;
  return Status::ok();
}

void forget_prepared(Store& store, const std::string& tx) {
  WriteBatch batch;
  batch.del(record_key(tx));
  if (auto s = store.write_meta(batch); !s) log::warn("forgetting prepared change {}: {}", tx, s.to_string());
}

std::vector<KeptChange> restore_prepared(Store& store) {
  std::vector<std::pair<std::string, std::string>> records;
  if (auto s = store.scan_meta(Store::kPreparedPrefix,
                               [&](std::string_view key, std::string_view value) {
                                 records.emplace_back(std::string(key.substr(Store::kPreparedPrefix.size())),
                                                      std::string(value));
                                 return Status::ok();
                               });
      !s) {
    log::error("reading the prepared changes kept in the metadata: {}", s.to_string());
    return {};
  }
  const auto snap = store.snapshot();
  std::vector<KeptChange> out;
  for (const auto& [tx, value] : records) {
    const std::string where = "prepared change " + tx + " kept in the metadata";
    auto rec = parse_json(value, where, Code::kCorrupt);
    Result<PreparedChange> c =
        rec ? (rec->is_object() ? rebuild(store, *snap, *rec, where) : corrupt(where + ": not an object"))
            : Result<PreparedChange>(rec.status());
    if (c) {
      log::info("kept {} (transaction {}) across the restart; it waits for its decision", describe(*c), tx);
      out.push_back(KeptChange{tx, std::move(c).value(), (*rec)["about"]});
      continue;
    }
    forget_prepared(store, tx);
    if (c.status().code() == Code::kAlreadyExists) {
      log::info("the change of transaction {} was committed before the restart", tx);
      for (uint64_t id : (*rec)["blobs"].get<std::vector<uint64_t>>()) store.blobs().settle(id);
      continue;
    }
    log::warn("dropping {}: {}", where, c.status().to_string());
    if (rec && rec->is_object() && rec->contains("blobs") && (*rec)["blobs"].is_array()) {
      std::vector<uint64_t> ids;
      for (const auto& b : (*rec)["blobs"])
        if (b.is_number_unsigned()) ids.push_back(b.get<uint64_t>());
      remove_blobs(store, ids);
    }
  }
  return out;
}

}  // namespace ptcfs
