#include "cli/export_s3.h"

#include <unistd.h>
#include <xxhash.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <memory>
#include <vector>

#include "cli/output.h"
#include "cli/step_files.h"
#include "transport/s3_client.h"

namespace ptcfs::cli {

namespace {

using nlohmann::json;
using transport::S3Body;
using transport::S3Client;
using transport::S3Part;

constexpr uint64_t kPart = 64 << 20;  // multipart part size, and the read buffer

// Uploads one open file of the step, returning its XXH3-64. Files up to kPart: one PUT; larger:
// multipart (aborted on error).
Result<uint64_t> upload(S3Client& c, const std::string& dir, const OpenFile& f, std::vector<char>& buf,
                        const std::function<void(uint64_t)>& advance) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  struct Free {
    XXH3_state_t* s;
    ~Free() { XXH3_freeState(s); }
  } free_state{st};
  const std::string from = dir + "/" + f.name;
  auto read_part = [&](uint64_t off, size_t n) -> Status {
    for (size_t done = 0; done < n;) {
      const ssize_t got = ::pread(f.fd.fd, buf.data() + done, n - done, static_cast<off_t>(off + done));
      if (got < 0) return io_error("reading " + from, errno);
      if (got == 0) return corrupt(from + ": shorter than it was when opened");
      done += static_cast<size_t>(got);
    }
    XXH3_64bits_update(st, buf.data(), n);
    return Status::ok();
  };
  if (f.size <= kPart) {
    PTC_RETURN_IF_ERROR(read_part(0, static_cast<size_t>(f.size)));
    PTC_RETURN_IF_ERROR(c.put(f.name, S3Body::of({buf.data(), static_cast<size_t>(f.size)})));
    advance(f.size);
    return XXH3_64bits_digest(st);
  }
  PTC_ASSIGN_OR_RETURN(const std::string id, c.start_multipart(f.name));
  std::vector<S3Part> parts;
  Status failed;
  for (uint64_t off = 0; off < f.size && failed.is_ok(); off += kPart) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kPart, f.size - off));
    failed = read_part(off, n);
    if (!failed) break;
    auto etag = c.put_part(f.name, id, static_cast<int>(parts.size() + 1), S3Body::of({buf.data(), n}));
    if (!etag) {
      failed = etag.status();
      break;
    }
    parts.push_back({static_cast<int>(parts.size() + 1), n, *etag});
    advance(n);
  }
  if (failed.is_ok()) failed = c.complete_multipart(f.name, id, parts);
  if (!failed) {
    (void)c.abort_multipart(f.name, id);
    return failed;
  }
  return XXH3_64bits_digest(st);
}

// The client of an export's prefix, which must be empty.
Result<std::unique_ptr<S3Client>> empty_prefix(const std::string& url, const S3Flags& flags) {
  PTC_ASSIGN_OR_RETURN(auto access,
                       transport::resolve_s3_access(flags.endpoint, flags.region, flags.credentials, flags.ca_file));
  if (!access) return invalid("exporting to " + url + " needs an S3 endpoint: --s3-endpoint or AWS_ENDPOINT_URL");
  PTC_ASSIGN_OR_RETURN(transport::S3Location loc, transport::parse_s3_url(url));
  PTC_ASSIGN_OR_RETURN(auto client, S3Client::make(access->options(loc)));
  PTC_ASSIGN_OR_RETURN(auto existing, client->list(""));
  if (!existing.empty())
    return invalid(url + " is not empty (" + std::to_string(existing.size()) + " objects under it, e.g. " +
                   existing.front().key + ")");
  return client;
}

// Uploads `files` in their order through `client`, each file's XXH3-64 into `digests`; `between`
// (may be empty) runs before the last file. On an error what was uploaded is removed again.
Status upload_all(S3Client& client, const std::string& dir, const std::vector<const OpenFile*>& files,
                  std::vector<uint64_t>& digests, const std::function<Status(std::vector<std::string>&)>& between) {
  uint64_t total = 0;
  for (const auto* f : files) total += f->size;
  ProgressLine line("exporting");
  uint64_t done = 0;
  auto advance = [&](uint64_t n) { line.update(done += n, total); };
  std::vector<char> buf(kPart);
  std::vector<std::string> uploaded;
  auto run = [&]() -> Status {
    for (size_t i = 0; i < files.size(); ++i) {
      if (i + 1 == files.size() && between) PTC_RETURN_IF_ERROR(between(uploaded));
      PTC_ASSIGN_OR_RETURN(const uint64_t digest, upload(client, dir, *files[i], buf, advance));
      uploaded.push_back(files[i]->name);
      digests.push_back(digest);
    }
    return Status::ok();
  };
  if (Status s = run(); !s) {
    for (const auto& name : uploaded) (void)client.remove(name);  // leave the prefix as it was
    return s;
  }
  line.finish();
  return Status::ok();
}

}  // namespace

Result<json> export_ptc_s3(const std::string& step_dir, const std::string& url, const S3Flags& flags) {
  PTC_ASSIGN_OR_RETURN(auto client, empty_prefix(url, flags));
  PTC_ASSIGN_OR_RETURN(std::vector<OpenFile> files, open_step_files(step_dir));
  // Rank files, then the manifest, then ptc.json.
  std::vector<const OpenFile*> order;
  const OpenFile* ptc_json = nullptr;
  uint64_t total = 0;
  for (const auto& f : files) {
    total += f.size;
    if (f.name == "ptc.json")
      ptc_json = &f;
    else
      order.push_back(&f);
  }
  if (!ptc_json) return internal("the step's files have no ptc.json");
  order.push_back(ptc_json);
  std::vector<uint64_t> digests;
  PTC_RETURN_IF_ERROR(upload_all(*client, step_dir, order, digests, [&](std::vector<std::string>& uploaded) {
    formats::ExportManifest manifest;
    for (size_t i = 0; i < digests.size(); ++i) manifest.files.push_back({order[i]->name, order[i]->size, digests[i]});
    PTC_RETURN_IF_ERROR(client->put(kExportManifest, S3Body::of(formats::export_manifest_text(manifest))));
    uploaded.push_back(kExportManifest);
    return Status::ok();
  }));
  json names = json::array();
  for (const auto* f : order) names.push_back(f->name);
  return json{{"files", names}, {"bytes", total}, {"manifest", kExportManifest}};
}

Result<json> export_view_s3(const std::string& view_dir, const std::string& url, const S3Flags& flags,
                            const std::vector<std::string>& last) {
  PTC_ASSIGN_OR_RETURN(auto client, empty_prefix(url, flags));
  PTC_ASSIGN_OR_RETURN(std::vector<OpenFile> files, open_view_files(view_dir));
  std::vector<const OpenFile*> order;
  uint64_t total = 0;
  for (const auto& f : files)
    if (std::find(last.begin(), last.end(), f.name) == last.end()) order.push_back(&f);
  for (const auto& name : last)
    for (const auto& f : files)
      if (f.name == name) order.push_back(&f);
  for (const auto* f : order) total += f->size;
  std::vector<uint64_t> digests;
  PTC_RETURN_IF_ERROR(upload_all(*client, view_dir, order, digests, {}));
  json names = json::array();
  for (const auto* f : order) names.push_back(f->name);
  return json{{"files", names}, {"bytes", total}};
}

}  // namespace ptcfs::cli
