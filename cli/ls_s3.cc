// The step copies under an S3 prefix (cli/ls_s3.h).
#include "cli/ls_s3.h"

#include "ptc/model.h"
#include "transport/s3_client.h"
#include "transport/s3_request.h"

namespace ptcfs::cli {

using nlohmann::json;

namespace {
constexpr const char* kPtcJson = "ptc.json";
constexpr const char* kPartsDir = ".ptcfs-parts/";
constexpr uint64_t kMaxSmall = uint64_t{16} << 20;  // a manifest or ptc.json, read whole

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

std::vector<CopyFolder> copy_folders(const std::vector<transport::S3Object>& objects, const std::string& prefix) {
  std::map<std::string, CopyFolder> by_dir;
  std::map<std::string, bool> marked;  // a dir holding ptc.json or a manifest
  for (const auto& o : objects) {
    if (o.key.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rel = o.key.substr(prefix.size());
    if (rel.find(kPartsDir) != std::string::npos) continue;
    const size_t slash = rel.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : rel.substr(0, slash + 1);
    const std::string name = rel.substr(dir.size());
    CopyFolder& f = by_dir[dir];
    f.dir = dir;
    f.files[name] = o.size;
    if (name == kPtcJson || name == formats::kExportManifest) marked[dir] = true;
  }
  std::vector<CopyFolder> out;
  for (auto& [dir, f] : by_dir)
    if (marked.count(dir)) out.push_back(std::move(f));
  return out;
}

CopyState copy_state(const CopyFolder& f, const std::optional<formats::ExportManifest>& m) {
  CopyState s;
  const bool committed = f.files.count(kPtcJson) > 0;
  if (m) {
    s.files = m->files.size();
    for (const auto& e : m->files) {
      s.bytes += e.size;
      auto it = f.files.find(e.name);
      if (s.note.empty() && it == f.files.end()) s.note = e.name + " is missing";
      if (s.note.empty() && it != f.files.end() && it->second != e.size)
        s.note = e.name + " is " + std::to_string(it->second) + " bytes; the manifest states " + std::to_string(e.size);
    }
  } else {
    for (const auto& [name, size] : f.files)
      if (ends_with(name, ".safetensors")) {
        ++s.files;
        s.bytes += size;
      }
  }
  if (!committed) {
    s.state = "incomplete";
    s.note = "no ptc.json: being written, or cut short (never imported as a whole step)";
  } else if (!m) {
    s.state = "unchecked";
    s.note = "no " + std::string(formats::kExportManifest) + ": import checks the rank files' headers only";
  } else {
    s.state = s.note.empty() ? "whole" : "damaged";
  }
  return s;
}

Result<json> ls_s3(const std::string& url, const S3Flags& flags) {
  PTC_ASSIGN_OR_RETURN(auto access,
                       transport::resolve_s3_access(flags.endpoint, flags.region, flags.credentials, flags.ca_file));
  if (!access) return invalid("listing " + url + " needs an S3 endpoint: --s3-endpoint or AWS_ENDPOINT_URL");
  PTC_ASSIGN_OR_RETURN(const transport::S3Location loc, transport::parse_s3_url(url));
  PTC_ASSIGN_OR_RETURN(auto client, transport::S3Client::make(access->options(loc)));
  PTC_ASSIGN_OR_RETURN(const auto objects, client->list(""));
  json copies = json::array();
  for (const CopyFolder& f : copy_folders(objects, "")) {
    std::optional<formats::ExportManifest> m;
    if (f.files.count(formats::kExportManifest)) {
      const std::string key = f.dir + formats::kExportManifest;
      PTC_ASSIGN_OR_RETURN(const std::string text, client->get(key, kMaxSmall));
      PTC_ASSIGN_OR_RETURN(m, formats::parse_export_manifest(text, client->where(key)));
    }
    const CopyState s = copy_state(f, m);
    json c = {{"path", f.dir.empty() ? "" : f.dir.substr(0, f.dir.size() - 1)},
              {"url", client->where(f.dir.empty() ? "" : f.dir.substr(0, f.dir.size() - 1))},
              {"state", s.state},
              {"files", s.files},
              {"bytes", s.bytes}};
    if (!s.note.empty()) c["note"] = s.note;
    if (m && m->version) c["version"] = m->version;
    if (m && !m->origin.empty()) c["origin"] = m->origin;
    if (f.files.count(kPtcJson)) {
      const std::string key = f.dir + kPtcJson;
      PTC_ASSIGN_OR_RETURN(const std::string text, client->get(key, kMaxSmall));
      if (auto ptc = ptc::parse_ptc_json(text, client->where(key)))
        c["parallelism"] = {{"tp", ptc->parallelism.tp}, {"pp", ptc->parallelism.pp}, {"dp", ptc->parallelism.dp}};
      else
        c["state"] = "damaged", c["note"] = ptc.status().message();
    }
    copies.push_back(std::move(c));
  }
  return json{{"where", client->where("")}, {"copies", std::move(copies)}};
}

}  // namespace ptcfs::cli
