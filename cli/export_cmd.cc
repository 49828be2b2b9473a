#include "cli/export_cmd.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include "cli/output.h"
#include "cli/python_cmd.h"
#include "cli/size_arg.h"
#include "cli/step_files.h"
#include "ptc/formats/hf_config.h"
#include "ptc/formats/npy.h"
#include "ptc/formats/rank_file.h"
#include "ptc/formats/safetensors.h"
#include "ptc/model.h"

namespace ptcfs::cli {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Appends [offset, offset + n) of `from` to `to`, counting bytes with `advance`.
Status copy_range(int from, const std::string& from_path, uint64_t offset, uint64_t n, int to,
                  const std::string& to_path, const std::function<void(uint64_t)>& advance) {
  std::vector<char> buf(4 << 20);
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), n));
    const ssize_t got = ::pread(from, buf.data(), want, static_cast<off_t>(offset));
    if (got < 0) return io_error("reading " + from_path, errno);
    if (got == 0) return corrupt(from_path + ": shorter than its header says");
    for (size_t done = 0; done < static_cast<size_t>(got);) {
      const ssize_t w = ::write(to, buf.data() + done, static_cast<size_t>(got) - done);
      if (w < 0) return io_error("writing " + to_path, errno);
      done += static_cast<size_t>(w);
    }
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
    advance(static_cast<uint64_t>(got));
  }
  return Status::ok();
}

Status write_file(const std::string& path, const std::string& bytes) {
  Fd out{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644)};
  if (out.fd < 0) return io_error("creating " + path, errno);
  if (::write(out.fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
    return io_error("writing " + path, errno);
  if (::fsync(out.fd) != 0) return io_error("syncing " + path, errno);
  return Status::ok();
}

// The step's directory in the mount, and its ptc.json.
struct Source {
  std::string dir;
  ptc::Ptc ptc;
};

Result<Source> source_of(const ExportArgs& a, const Globals& g) {
  const size_t slash = a.step_path.find('/');
  if (slash == std::string::npos) return invalid("'" + a.step_path + "' is not JOB/STEP");
  const std::string job = a.step_path.substr(0, slash), step = a.step_path.substr(slash + 1);
  PTC_RETURN_IF_ERROR(ptc::validate_id("job", job));
  PTC_RETURN_IF_ERROR(ptc::validate_id("step", step));
  std::string mount = a.mount;
  if (mount.empty()) {
    PTC_ASSIGN_OR_RETURN(json st, call(g, {{"op", "status"}}));
    mount = st.value("mount", std::string());
  }
  PTC_ASSIGN_OR_RETURN(json ls, call(g, {{"op", "ls"}, {"path", a.step_path}}));
  if (ls.value("state", std::string("committed")) != "committed")
    return error(Code::kFailedPrecondition, a.step_path +
                                                " is still being saved (pending); export it "
                                                "once it is committed");
  Source s{mount + "/" + job + "/" + step, {}};
  std::error_code ec;
  if (!fs::is_directory(s.dir, ec))
    return not_found("the daemon's mount shows " + a.step_path + " at " + s.dir +
                     ", which this machine does not see (run export on the daemon's node, or give --mount)");
  PTC_ASSIGN_OR_RETURN(std::string text, read_text_file(s.dir + "/ptc.json"));
  PTC_ASSIGN_OR_RETURN(s.ptc, ptc::parse_ptc_json(text, s.dir + "/ptc.json"));
  return s;
}

// One output file of the hf format: its tensors in order.
struct HfShard {
  std::vector<const ptc::TensorSpec*> tensors;
  uint64_t bytes = 0;
};

Result<json> export_hf(const Source& src, const std::string& dir, uint64_t max_shard) {
  // Tensors in name order, a new file whenever the next would pass the size (a bigger tensor
  // gets a file of its own), as Hugging Face's writers split.
  std::vector<HfShard> shards(1);
  uint64_t total = 0;
  for (const auto& t : src.ptc.tensors) {
    const uint64_t n = static_cast<uint64_t>(ptc::num_elements(t.shape)) * ptc::dtype_size(t.dtype);
    if (!shards.back().tensors.empty() && shards.back().bytes + n > max_shard) shards.emplace_back();
    shards.back().tensors.push_back(&t);
    shards.back().bytes += n;
    total += n;
  }
  ProgressLine line("exporting");
  uint64_t done = 0;
  auto advance = [&](uint64_t n) { line.update(done += n, total); };
  json weight_map = json::object(), files = json::array();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string name = shards.size() == 1
                                 ? "model.safetensors"
                                 : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
    std::vector<formats::TensorDecl> decls;
    for (const auto* t : shards[k].tensors) decls.push_back({t->name, t->dtype, t->shape});
    PTC_ASSIGN_OR_RETURN(auto layout, formats::layout_safetensors(decls, {{"format", "pt"}}));
    const std::string path = dir + "/" + name;
    Fd out{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644)};
    if (out.fd < 0) return io_error("creating " + path, errno);
    if (::write(out.fd, layout.header.data(), layout.header.size()) != static_cast<ssize_t>(layout.header.size()))
      return io_error("writing " + path, errno);
    for (const auto* t : shards[k].tensors) {
      const std::string view = src.dir + "/full/" + t->name + ".npy";
      Fd in{::open(view.c_str(), O_RDONLY)};
      if (in.fd < 0) return io_error("opening " + view, errno);
      struct stat st {};
      if (::fstat(in.fd, &st) != 0) return io_error(view, errno);
      std::string prefix(formats::npy_header(t->dtype, t->shape).size(), '\0');
      if (::pread(in.fd, prefix.data(), prefix.size(), 0) != static_cast<ssize_t>(prefix.size()))
        return io_error("reading " + view, errno);
      PTC_ASSIGN_OR_RETURN(auto npy, formats::parse_npy(prefix, static_cast<uint64_t>(st.st_size), view));
      PTC_RETURN_IF_ERROR(copy_range(in.fd, view, npy.data_start, npy.data_bytes, out.fd, path, advance));
      weight_map[t->name] = name;
    }
    if (::fsync(out.fd) != 0) return io_error("syncing " + path, errno);
    files.push_back(name);
  }
  if (shards.size() > 1) {
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    PTC_RETURN_IF_ERROR(write_file(dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  }
  if (!src.ptc.hf_config.empty()) {  // the model's config.json, kept since its import or save
    PTC_RETURN_IF_ERROR(write_file(dir + "/" + formats::kHfConfigFile, json::parse(src.ptc.hf_config).dump(2) + "\n"));
  }
  line.finish();
  return json{
      {"files", files}, {"tensors", src.ptc.tensors.size()}, {"bytes", total}, {"config", !src.ptc.hf_config.empty()}};
}

Result<json> export_ptc(const Source& src, const std::string& dir) {
  PTC_ASSIGN_OR_RETURN(std::vector<OpenFile> opened, open_step_files(src.dir));
  uint64_t total = 0;
  json names = json::array();
  for (const auto& f : opened) {
    total += f.size;
    names.push_back(f.name);
  }
  ProgressLine line("exporting");
  uint64_t done = 0;
  auto advance = [&](uint64_t n) { line.update(done += n, total); };
  for (const auto& f : opened) {
    const std::string from = src.dir + "/" + f.name, to = dir + "/" + f.name;
    Fd out{::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644)};
    if (out.fd < 0) return io_error("creating " + to, errno);
    PTC_RETURN_IF_ERROR(copy_range(f.fd.fd, from, 0, f.size, out.fd, to, advance));
    if (::fsync(out.fd) != 0) return io_error("syncing " + to, errno);
  }
  line.finish();
  return json{{"files", names}, {"tensors", src.ptc.tensors.size()}, {"bytes", total}};
}

}  // namespace

void add_s3_flags(CLI::App& cmd, S3Flags& s3) {
  cmd.add_option("--s3-endpoint", s3.endpoint,
                 "S3 endpoint http(s)://HOST[:PORT] (default: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL)");
  cmd.add_option("--s3-region", s3.region, "S3 region (default: AWS_REGION, AWS_DEFAULT_REGION, us-east-1)");
  cmd.add_option("--s3-credentials", s3.credentials,
                 "AWS shared-credentials file (default: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)");
  cmd.add_option("--s3-ca-file", s3.ca_file, "CA bundle for an https S3 endpoint");
}

CLI::App* add_export_command(CLI::App& app, ExportArgs& a, Globals& g) {
  auto* cmd = app.add_subcommand("export",
                                 "Write a committed step out: hf (full tensors as Hugging Face safetensors "
                                 "shards with an index) or ptc (ptc.json and rank files, as import reads); "
                                 "reads the daemon's mount");
  cmd->add_option("JOB/STEP", a.step_path, "The step")->required();
  cmd->add_option("DIR", a.dir,
                  "A new or empty directory to write, or s3://BUCKET/PREFIX (empty; ptc, hf or dcp; docs/OPERATIONS.md "
                  "\"The S3 tier\")")
      ->required();
  cmd->add_option("--format", a.format,
                  "hf, ptc, or dcp (a PyTorch Distributed Checkpoint directory, through the Python package); "
                  "default hf, and ptc to s3://, where hf and dcp upload the mount's hf/ or dcp/ view as it is")
      ->check(CLI::IsMember({"hf", "ptc", "dcp"}));
  add_s3_flags(*cmd, a.s3);
  cmd->add_option("--max-shard-size", a.max_shard_size,
                  "hf: the largest file (5GB = 5x10^9 bytes, 100kB, 2GiB, ...; units ignore case)")
      ->capture_default_str();
  cmd->add_option("--mount", a.mount, "The daemon's mount point (default: asked from the daemon)");
  cmd->add_flag("--json", g.json, "Print the result as JSON");
  return cmd;
}

int run_export(const ExportArgs& args, const Globals& g) {
  ExportArgs a = args;
  const bool s3 = a.dir.rfind("s3://", 0) == 0;
  if (a.format.empty()) a.format = s3 ? "ptc" : "hf";

  auto max_shard = parse_size(a.max_shard_size);
  if (!max_shard) return fail(max_shard.status().with_context("--max-shard-size"));
  auto src = source_of(a, g);
  if (!src) return fail(src.status());
  if (s3) {
    Result<json> r = internal("not exported");
    if (a.format == "ptc") {
      r = export_ptc_s3(src->dir, a.dir, a.s3);
    } else {
      // A view of the mount as it is (docs/FORMATS.md): hf/ (the daemon's --hf-shard-bytes shards it) or dcp/.
      const bool hf = a.format == "hf";
      const std::string view = src->dir + (hf ? "/hf" : "/dcp");
      std::error_code ec;
      if (hf && !fs::is_directory(view, ec))
        return fail(invalid(a.step_path + " has no Hugging Face view (hf/): its ptc.json carries no config.json "
                                          "(a step imported with --format hf or saved with save_pretrained has one)"));
      r = export_view_s3(view, a.dir, a.s3,
                         hf ? std::vector<std::string>{"model.safetensors.index.json", "config.json"}
                            : std::vector<std::string>{".metadata"});
    }
    if (!r) return fail(r.status().with_context("exporting " + a.step_path + " to " + a.dir));
    (*r)["format"] = a.format;
    (*r)["dir"] = a.dir;
    (*r)["tensors"] = src->ptc.tensors.size();
    if (g.json) return print_json(*r);
    fmt::print("exported {} to {} ({}): {} objects{}, {} tensors, {}\n", a.step_path, a.dir, a.format,
               (*r)["files"].size(), r->contains("manifest") ? std::string(" and ") + kExportManifest : "",
               src->ptc.tensors.size(), human_bytes((*r)["bytes"].get<uint64_t>()));
    return 0;
  }
  if (a.format == "dcp") return exec_python(g, {"export-dcp", src->dir, a.dir}, false);
  std::error_code ec;
  const bool existed = fs::exists(a.dir, ec);
  if (existed && !fs::is_empty(a.dir, ec)) return fail(invalid(a.dir + " is not empty"));
  if (!existed && !fs::create_directories(a.dir, ec)) return fail(invalid(a.dir + ": " + ec.message()));
  auto r = a.format == "hf" ? export_hf(*src, a.dir, *max_shard) : export_ptc(*src, a.dir);
  if (!r) {
    // Leave nothing half-written behind.
    for (const auto& e : fs::directory_iterator(a.dir, ec)) fs::remove(e.path(), ec);
    if (!existed) fs::remove(a.dir, ec);
    return fail(r.status().with_context("exporting " + a.step_path + " to " + a.dir));
  }
  (*r)["format"] = a.format;
  (*r)["dir"] = a.dir;
  if (g.json) return print_json(*r);
  fmt::print("exported {} to {} ({}): {} files, {} tensors, {}\n", a.step_path, a.dir, a.format, (*r)["files"].size(),
             (*r)["tensors"].get<size_t>(), human_bytes((*r)["bytes"].get<uint64_t>()));
  return 0;
}

}  // namespace ptcfs::cli
