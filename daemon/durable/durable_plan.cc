#include "daemon/durable/durable_plan.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "ptc/base/json_util.h"

namespace ptcfs::durable {

using nlohmann::json;

std::string step_prefix(const std::string& job, const std::string& step) { return job + "/" + step + "/"; }

std::string rank_file(const ptc::ShardId& shard) { return shard.name() + ".safetensors"; }

UploadPlan plan_upload(const ptc::Layout& layout, const std::vector<std::vector<std::string>>& holders,
                       const std::string& self) {
  UploadPlan plan;
  const auto& shards = layout.shards();
  for (size_t i = 0; i < shards.size(); ++i) {
    if (i >= holders.size() || holders[i].empty() || holders[i].front() != self) continue;
    plan.shards.push_back(shards[i]);
    if (i == 0) plan.commits = true;
  }
  return plan;
}

json to_json(const FilePart& p) {
  json j = formats::to_json(p.entry());
  j["version"] = p.version;
  j["written"] = p.written;
  if (!p.origin.empty()) j["origin"] = p.origin;
  return j;
}

Result<FilePart> part_from_json(const json& j, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(const formats::ExportFile f, formats::export_file_from_json(j, where));
  PTC_ASSIGN_OR_RETURN(const uint64_t version, member_u64(j, "version", where));
  PTC_ASSIGN_OR_RETURN(const uint64_t written, member_u64_or(j, "written", 0, where));
  if (written > uint64_t{1} << 40) return invalid(where + ": 'written' is not a time");
  PTC_ASSIGN_OR_RETURN(std::string origin, member_string_or(j, "origin", "", where));
  return FilePart{f.name, f.size, f.xxh3, version, static_cast<int64_t>(written), std::move(origin)};
}

bool of_version(const FilePart& p, const VersionId& v) {
  if (p.version != v.version) return false;
  if (!p.origin.empty() && !v.origin.empty()) return p.origin == v.origin;
  constexpr int64_t kClockSlack = 1;  // an origin unknown on either side: the record's time decides
  return p.written + kClockSlack >= v.committed;
}

bool same_origin(const std::string& a, const std::string& b) { return a.empty() || b.empty() || a == b; }

std::vector<std::string> missing_parts(const ptc::Layout& layout, const VersionId& v,
                                       const std::vector<FilePart>& parts) {
  std::set<std::string> have;
  for (const auto& p : parts)
    if (of_version(p, v)) have.insert(p.name);
  std::vector<std::string> out;
  for (const auto& s : layout.shards())
    if (!have.count(rank_file(s))) out.push_back(rank_file(s));
  return out;
}

}  // namespace ptcfs::durable
