// Evicted blobs' records and their map into the durable copy (daemon/durable/evicted_blob.h).
#include "daemon/durable/evicted_blob.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/durable/durable_plan.h"
#include "daemon/store/step_version.h"
#include "fs/views.h"
#include "ptc/base/json_util.h"

namespace ptcfs::durable {

using nlohmann::json;

uint64_t EvictedBlob::covered() const {
  uint64_t n = 0;
  for (const auto& r : ranges) n += r.len;
  return n;
}

std::string evicted_key(uint64_t blob) { return fmt::format("{}{:016x}", kEvictedPrefix, blob); }

std::string evicted_json(const EvictedBlob& e) {
  json ranges = json::array();
  for (const auto& r : e.ranges) ranges.push_back(json::array({r.blob_off, r.len, r.object, r.object_off}));
  return json{{"blob", e.blob}, {"size", e.size}, {"xxh3", e.xxh3}, {"ranges", std::move(ranges)}}.dump();
}

Result<EvictedBlob> evicted_from_json(std::string_view text, const std::string& where) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return corrupt(where + ": not a JSON object");
  EvictedBlob e;
  for (auto [key, to] : {std::pair{"blob", &e.blob}, {"size", &e.size}, {"xxh3", &e.xxh3}}) {
    auto v = member_u64(j, key, where);
    if (!v) return corrupt(v.status().message());  // a stored record: damaged, not a bad request
    *to = *v;
  }
  if (!j.contains("ranges") || !j["ranges"].is_array()) return corrupt(where + ": no \"ranges\" array");
  uint64_t end = 0;
  for (const auto& r : j["ranges"]) {
    if (!r.is_array() || r.size() != 4 || !r[0].is_number_unsigned() || !r[1].is_number_unsigned() ||
        !r[2].is_string() || !r[3].is_number_unsigned())
      return corrupt(where + ": a range is not [blob offset, length, object, object offset]: " + r.dump());
    CopyRange c{r[0].get<uint64_t>(), r[1].get<uint64_t>(), r[2].get<std::string>(), r[3].get<uint64_t>()};
    if (c.len == 0 || c.blob_off < end || c.blob_off > e.size || c.len > e.size - c.blob_off)
      return corrupt(where + ": range " + r.dump() + " overlaps another or passes the blob's end");
    end = c.blob_off + c.len;
    e.ranges.push_back(std::move(c));
  }
  return e;
}

Status copy_ranges(const StepVersion& v, const std::string& dir, std::map<uint64_t, std::vector<CopyRange>>& out) {
  const auto& layout = v.layout();
  for (const auto& shard : layout.shards()) {
    if (!v.holds(shard)) continue;
    auto file = fs::shard_safetensors_layout(layout, shard);
    if (!file) return internal("laying out " + rank_file(shard) + ": " + file.status().message());
    const std::string object = dir + rank_file(shard);
    const uint64_t data_start = file->header.size();
    const auto& slices = layout.slices(shard);
    for (size_t j = 0; j < slices.size(); ++j) {
      uint64_t at = data_start + file->entries[j].begin;
      for_each_piece(v.stored(shard, j), 0, layout.bytes(slices[j]), [&](uint64_t blob, uint64_t off, uint64_t n) {
        if (blob != kZeroBlob) out[blob].push_back(CopyRange{off, n, object, at});
        at += n;
      });
    }
  }
  return Status::ok();
}

std::vector<CopyRange> merge_ranges(std::vector<CopyRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const CopyRange& a, const CopyRange& b) {
    return a.blob_off != b.blob_off ? a.blob_off < b.blob_off : a.len > b.len;
  });
  std::vector<CopyRange> out;
  for (auto& r : ranges) {
    if (!out.empty()) {
      CopyRange& last = out.back();
      const uint64_t end = last.blob_off + last.len;
      if (r.blob_off + r.len <= end) continue;  // named already
      if (r.blob_off < end) {                   // its first bytes are named already
        const uint64_t skip = end - r.blob_off;
        r.blob_off += skip;
        r.object_off += skip;
        r.len -= skip;
      }
      if (r.blob_off == end && r.object == last.object && r.object_off == last.object_off + last.len) {
        last.len += r.len;
        continue;
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ptcfs::durable
