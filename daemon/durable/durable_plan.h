// The durable copy of a step in S3 (docs/OPERATIONS.md "The S3 tier"), as pure data: where its
// objects lie, which of them this node writes, and the small JSON records the nodes leave there.
//
// A step's durable copy is the `ptcfs export` format under PREFIX/<job>/<step>/: the rank files
// of one layout, ptcfs-export.json (each file's size and XXH3-64) and ptc.json, written last: a
// copy without ptc.json is not a copy yet. Each rank file is written by the first node holding
// its shard, which then leaves a part record (.ptcfs-parts/<file>.json: the file's size, XXH3
// and the version it was cut from). The node writing the first shard's file commits the copy:
// once every file of its version has its part record, it removes what another layout left
// there, then writes the manifest, then ptc.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ptc/base/status.h"
#include "ptc/formats/export_manifest.h"
#include "ptc/layout.h"

namespace ptcfs::durable {

// Where a step's copy lies, relative to the tier's prefix: "<job>/<step>/".
std::string step_prefix(const std::string& job, const std::string& step);
inline constexpr const char* kManifest = formats::kExportManifest;
inline constexpr const char* kPtcJson = "ptc.json";
inline constexpr const char* kPartsDir = ".ptcfs-parts/";
// "tp{t}-pp{p}.safetensors"
std::string rank_file(const ptc::ShardId& shard);

// What one node writes of a version: the rank files of the shards it is the first holder of,
// and whether it commits the copy (it writes the first shard's file).
struct UploadPlan {
  std::vector<ptc::ShardId> shards;
  bool commits = false;
};
// `holders[i]`: the ids of the nodes holding shard i of `layout` (layout.shards() order), the
// first of them writing it; a shard held by no node is written by nobody (the copy then waits).
UploadPlan plan_upload(const ptc::Layout& layout, const std::vector<std::vector<std::string>>& holders,
                       const std::string& self);

// One rank file of a copy as its writer left it (the part record): the manifest's entry, the
// version of the step it was cut from and that version's origin (StepVersion::origin, the same
// on every node), and when the record was written.
struct FilePart {
  std::string name;
  uint64_t size = 0, xxh3 = 0;
  uint64_t version = 0;
  int64_t written = 0;  // when the record was written, seconds since the epoch (its writer's clock)
  std::string origin{};
  bool operator==(const FilePart&) const = default;
  formats::ExportFile entry() const { return {name, size, xxh3}; }
};

// The version a part record or manifest is of: its number, its origin and when this node
// committed it (seconds since the epoch).
struct VersionId {
  uint64_t version = 0;
  std::string origin;
  int64_t committed = 0;
};
// Whether a part record was cut from `v`. Told apart by origin: two steps once saved under one
// name have the same version number but never the same origin. Where either has none (a version an
// older ptcfsd stored, a record an older one wrote), a record written before the version's commit
// (a second's slack for clocks) is another's.
bool of_version(const FilePart& p, const VersionId& v);
// Whether two origins may be the same version's: equal, or one of them unknown (empty).
bool same_origin(const std::string& a, const std::string& b);
nlohmann::json to_json(const FilePart& p);
// `where` names the object in errors.
Result<FilePart> part_from_json(const nlohmann::json& j, const std::string& where);

// Whether the parts cover every rank file of `layout` cut from `v`; the missing names
// otherwise (for the state's "waiting for" message).
std::vector<std::string> missing_parts(const ptc::Layout& layout, const VersionId& v,
                                       const std::vector<FilePart>& parts);

}  // namespace ptcfs::durable
