// ptcfs: the command-line client of a ptcfsd daemon. A thin client: every command is one
// request to the control service (docs/FORMATS.md); output is human-readable, or the
// daemon's JSON with --json.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/validators.h"
#include "cli/allocate_cmd.h"
#include "cli/autoscale_cmd.h"
#include "cli/export_cmd.h"
#include "cli/ls_s3.h"
#include "cli/ptc_cmd.h"
#include "cli/client.h"
#include "cli/dataset_cmd.h"
#include "cli/output.h"
#include "cli/plan_cmd.h"
#include "cli/python_cmd.h"
#include "transport/auth.h"
#include "transport/rpc.h"

namespace {

using nlohmann::json;
using ptcfs::cli::call;
using ptcfs::cli::fail;
using ptcfs::cli::Globals;
using ptcfs::cli::human_bytes;
using ptcfs::cli::print_json;

int cmd_status(const Globals& g) {
  auto r = call(g, {{"op", "status"}});
  if (!r) return fail(r.status());
  if (g.json) return print_json(*r);
  const json& j = *r;
  fmt::print("daemon   {} (ptcfsd {}, up {:.0f} s)\n", j["listen"].get<std::string>(), j["version"].get<std::string>(),
             j["uptime_s"].get<double>());
  fmt::print("data     {}\n", j["data"].get<std::string>());
  fmt::print("mount    {}\n", j["mount"].get<std::string>());
  fmt::print("stored   {} jobs, {} steps, {}\n", j["jobs"].get<size_t>(), j["steps"].get<size_t>(),
             human_bytes(j["bytes_stored"].get<uint64_t>()));
  if (j.contains("s3_durable"))
    fmt::print("s3       committed steps written through to {}\n", j["s3_durable"].get<std::string>());
  if (j.contains("node")) {
    std::string nodes;
    for (const auto& n : j["cluster"]["nodes"]) nodes += (nodes.empty() ? "" : ", ") + n["id"].get<std::string>();
    fmt::print("node     {} of a {}-node cluster ({})\n", j["node"].get<std::string>(), j["cluster"]["nodes"].size(),
               nodes);
    const json m = j["cluster"].value("membership", json::object());
    if (m.value("mode", "") == "etcd")
      fmt::print("members  live nodes registered in etcd at {} (lease {} s){}\n", m.value("endpoints", ""),
                 m.value("lease_ttl_s", 0),
                 m.value("fenced", false) ? "; FENCED: etcd unreachable, no changes here" : "");
    for (const auto& n : j["cluster"]["nodes"]) {
      if (!n.contains("up")) continue;
      if (n["up"].get<bool>())
        fmt::print("  {:<10} {:<22} up    sent {:>10}  received {:>10}\n", n["id"].get<std::string>(),
                   n["addr"].get<std::string>(), human_bytes(n["bytes_sent"].get<uint64_t>()),
                   human_bytes(n["bytes_received"].get<uint64_t>()));
      else
        fmt::print("  {:<10} {:<22} DOWN  {}\n", n["id"].get<std::string>(), n["addr"].get<std::string>(),
                   n.value("error", ""));
    }
  }
  return 0;
}

// A committed step's durability in the write-through S3 tier (docs/OPERATIONS.md "The S3 tier").
void print_durable(const json& d) {
  const std::string state = d.value("state", "");
  std::string line = "  s3  " + state;
  if (state == "uploading" || state == "waiting")
    line += fmt::format(": {} of {} from this node", human_bytes(d.value("bytes_uploaded", uint64_t{0})),
                        human_bytes(d.value("bytes_total", uint64_t{0})));
  const uint64_t evicted = d.value("bytes_evicted", uint64_t{0});
  if (evicted) line += fmt::format(" ({} evicted from this node's disk)", human_bytes(evicted));
  fmt::print("{}  {}\n", line, d.value("where", ""));
  if (d.contains("note")) fmt::print("      {}\n", d["note"].get<std::string>());
}

// The step copies under an S3 prefix (cli/ls_s3.h).
int cmd_ls_s3(const Globals& g, const std::string& url, const ptcfs::cli::S3Flags& s3) {
  auto r = ptcfs::cli::ls_s3(url, s3);
  if (!r) return fail(r.status());
  if (g.json) return print_json(*r);
  const json& j = *r;
  if (j["copies"].empty()) fmt::print("no step copies under {}\n", j["where"].get<std::string>());
  for (const auto& c : j["copies"]) {
    std::string par;
    if (c.contains("parallelism"))
      par = fmt::format("tp={},pp={},dp={}", c["parallelism"]["tp"].get<int>(), c["parallelism"]["pp"].get<int>(),
                        c["parallelism"]["dp"].get<int>());
    const std::string version = c.contains("version") ? fmt::format("version {}", c["version"].get<uint64_t>()) : "";
    fmt::print("{:<24} {:<11} {:<16} {:>4} files {:>10}  {}\n", c["url"].get<std::string>(),
               c["state"].get<std::string>(), par, c["files"].get<size_t>(), human_bytes(c["bytes"].get<uint64_t>()),
               version);
    if (c.contains("note")) fmt::print("  {}\n", c["note"].get<std::string>());
  }
  return 0;
}

int cmd_ls(const Globals& g, const std::string& path) {
  auto r = call(g, {{"op", "ls"}, {"path", path}});
  if (!r) return fail(r.status());
  if (g.json) return print_json(*r);
  const json& j = *r;
  if (j.contains("jobs")) {
    if (j["jobs"].empty()) fmt::print("no jobs\n");
    for (const auto& job : j["jobs"]) {
      std::string steps;
      for (const auto& s : job["steps"]) steps += (steps.empty() ? "" : " ") + s.get<std::string>();
      std::string datasets;
      for (const auto& s : job.value("datasets", json::array()))
        datasets += (datasets.empty() ? "  datasets: " : " ") + s.get<std::string>();
      fmt::print("{:<24} {}{}\n", job["job"].get<std::string>(), steps, datasets);
    }
  } else if (j.value("state", "") == "pending") {
    fmt::print("{}/{}  pending: {} of {} written, {} files\n", j["job"].get<std::string>(),
               j["step"].get<std::string>(), human_bytes(j["bytes_written"].get<uint64_t>()),
               human_bytes(j["bytes_total"].get<uint64_t>()), j["files"].get<size_t>());
    for (const auto& e : j["errors"]) fmt::print("  error: {}\n", e.get<std::string>());
  } else if (j.contains("shards")) {
    const auto& p = j["parallelism"];
    fmt::print("{}/{}  tp={},pp={},dp={}  {} tensors  {}\n", j["job"].get<std::string>(), j["step"].get<std::string>(),
               p["tp"].get<int>(), p["pp"].get<int>(), p["dp"].get<int>(), j["tensors"].get<size_t>(),
               human_bytes(j["bytes"].get<uint64_t>()));
    for (const auto& s : j["shards"])
      fmt::print("  {:<12} {:>6} tensors  {:>10}\n", s["name"].get<std::string>(), s["tensors"].get<size_t>(),
                 human_bytes(s["bytes"].get<uint64_t>()));
    if (j.contains("durable")) print_durable(j["durable"]);
  } else {
    // A job: its steps, then its datasets (a job may hold only datasets, or nothing yet).
    const json durable = j.value("durable", json::object());
    for (const auto& s : j["steps"]) {
      const std::string step = s.get<std::string>();
      if (durable.contains(step))
        fmt::print("{:<16} {}\n", step, durable[step].get<std::string>());
      else
        fmt::print("{}\n", step);
    }
    std::string datasets;
    for (const auto& s : j.value("datasets", json::array())) datasets += " " + s.get<std::string>();
    if (!datasets.empty()) fmt::print("datasets:{}\n", datasets);
    if (j["steps"].empty() && datasets.empty()) fmt::print("{}: no steps or datasets\n", j["job"].get<std::string>());
  }
  return 0;
}

// --nodes n0,n1 (split by CLI11): the node ids to place the job's ranks on, in order.
void add_nodes(json& req, const std::vector<std::string>& nodes) {
  if (!nodes.empty()) req["nodes"] = nodes;
}

int cmd_rm(const Globals& g, const std::string& path) {
  auto r = call(g, {{"op", "rm"}, {"path", path}});
  if (!r) return fail(r.status());
  if (g.json) return print_json(*r);
  fmt::print("removed {} ({})\n", path, (*r)["removed"].get<std::string>());
  return 0;
}

// --format hf: the template (a shipped name, or a file whose text goes with the request)
// and the layout to go to.
struct ImportFormat {
  std::string format = "ptc", template_name, to;
};

int cmd_import(const Globals& g, const std::string& dir, const std::string& job, const std::string& step,
               const std::vector<std::string>& nodes, const ImportFormat& f) {
  std::error_code ec;
  const bool s3 = dir.rfind("s3://", 0) == 0;  // read by the daemon with its own S3 access
  if (s3 && f.format == "megatron")
    return fail(
        ptcfs::invalid("from s3:// the daemon imports --format ptc, hf or dcp; for a Megatron-LM "
                       "checkpoint, download the folder first"));
  const auto abs = s3 ? std::filesystem::path(dir) : std::filesystem::absolute(dir, ec);
  if (ec) return fail(ptcfs::invalid(dir + ": " + ec.message()));
  json req = {{"op", "import"}, {"dir", s3 ? dir : abs.lexically_normal().string()}, {"job", job}, {"step", step}};
  if (f.format == "dcp" && s3) {
    // A stock DCP folder in S3: the daemon writes it through its save path (docs/OPERATIONS.md).
    if (!f.template_name.empty()) return fail(ptcfs::invalid("--template goes with --format hf"));
    if (!nodes.empty()) return fail(ptcfs::invalid("--nodes does not go with --format dcp"));
    req["format"] = "dcp";
  } else if (f.format == "dcp") {
    if (!f.template_name.empty() || !f.to.empty())
      return fail(ptcfs::invalid("--template and --to go with --format hf"));
    if (!nodes.empty()) return fail(ptcfs::invalid("--format dcp imports through this daemon's mount (no --nodes)"));
    return exec_python(g, {"import-dcp", abs.lexically_normal().string(), "--job", job, "--step", step}, true);
  }
  if (f.format == "megatron")
    return fail(ptcfs::invalid(
        "Megatron-LM checkpoints are read with torch by the Python package (docs/PYTHON.md): python3 -m "
        "ptcfs import-megatron " +
        dir + " --job " + job + " [--step S] [--to tp=T,pp=P] (docs/FORMATS.md, \"Megatron-LM checkpoints\")"));
  if (f.format == "hf") {
    if (f.template_name.empty()) return fail(ptcfs::invalid("--format hf needs --template NAME or a template file"));
    std::string text;
    auto tmpl = ptcfs::cli::load_template(f.template_name, &text);
    if (!tmpl) return fail(tmpl.status());
    req["format"] = "hf";
    req["template"] = f.template_name;
    if (!text.empty()) req["template_text"] = text;
  } else if (!f.template_name.empty()) {
    return fail(ptcfs::invalid("--template goes with --format hf"));
  }
  if (!f.to.empty()) req["to"] = f.to;
  ptcfs::cli::ProgressLine line("importing " + job + "/" + step);
  add_nodes(req, nodes);
  auto r = call(g, req, [&](const json& p) {
    if (!g.json) line.update(p.value("done", uint64_t{0}), p.value("total", uint64_t{0}));
  });
  line.finish();
  if (!r) return fail(r.status());
  if (g.json) return print_json(*r);
  const json& j = *r;
  fmt::print("imported {}/{}: {} shards, {} tensors, {} in {:.2f} s{}\n", job, step, j["shards"].get<size_t>(),
             j["tensors"].get<size_t>(), human_bytes(j["bytes"].get<uint64_t>()), j["seconds"].get<double>(),
             j.contains("repartition") ? ", then repartitioned to " + f.to : std::string());
  return 0;
}

// --to, or the planner's best for --gpus N and --model MODEL.json (printed, or in the JSON
// result as "planned").
struct Target {
  std::string to, model;
  std::string chunks;  // a JSON file of the boxes a job will load, per tensor: the tp is derived from them
  int gpus = 0;
  uint64_t global_batch = 0;  // the job's datasets' new global batch (0: unchanged)
};

int cmd_repartition(const Globals& g, const std::string& job, const std::string& step, const Target& target,
                    bool dry_run, const std::vector<std::string>& nodes) {
  std::string to = target.to;
  json planned, chunks;
  if (!target.chunks.empty()) {
    if (!to.empty() || target.gpus > 0 || !target.model.empty())
      return fail(ptcfs::invalid("give one of --to, --chunks, or --gpus and --model"));
    auto text = ptcfs::cli::read_text_file(target.chunks, size_t{1} << 20);
    if (!text) return fail(text.status());
    chunks = json::parse(*text, nullptr, false);
    if (chunks.is_discarded() || !chunks.is_object())
      return fail(
          ptcfs::invalid(target.chunks + ": expected a JSON object of tensor names to lists of [lo, hi] boxes"));
  } else if (!target.model.empty() || target.gpus > 0) {
    if (!to.empty()) return fail(ptcfs::invalid("give --to, or --gpus and --model, not both"));
    if (target.model.empty() || target.gpus <= 0)
      return fail(ptcfs::invalid("--gpus N and --model MODEL.json go together (the planner picks the configuration)"));
    auto best = ptcfs::cli::best_plan(target.model, target.gpus);
    if (!best) return fail(best.status());
    const auto& c = best->config;
    to = fmt::format("tp={},pp={},dp={}", c.tp, c.pp, c.dp);
    planned = ptcfs::cli::candidate_json(*best);
    if (!g.json)
      fmt::print("the planner's best for {} GPUs: {} (micro-batch {}, {:.2f} GiB per GPU, {:.4g} s per step)\n",
                 target.gpus, to, c.micro_batch, best->memory_gb(), best->step_seconds());
  } else if (to.empty()) {
    return fail(ptcfs::invalid(
        "give the new configuration: --to tp=T,pp=P,dp=D, --chunks FILE, or --gpus N --model MODEL.json"));
  }
  ptcfs::cli::ProgressLine line("repartition " + job + "/" + step);
  json req = {{"op", "repartition"}, {"job", job}, {"step", step}, {"dry_run", dry_run}};
  if (chunks.is_null())
    req["to"] = to;
  else
    req["chunks"] = std::move(chunks);
  if (target.global_batch) req["global_batch"] = target.global_batch;
  add_nodes(req, nodes);
  auto r = call(g, req, [&](const json& p) {
    if (g.json || p.value("phase", "") != "compact") return;
    line.update(p.value("done", uint64_t{0}), p.value("total", uint64_t{0}));
  });
  line.finish();
  if (!r) return fail(r.status());
  if (g.json) {
    if (!planned.is_null()) (*r)["planned"] = planned;
    return print_json(*r);
  }
  const json& j = *r;
  auto par = [](const json& p) {
    return "tp=" + std::to_string(p["tp"].get<int>()) + ",pp=" + std::to_string(p["pp"].get<int>()) +
           ",dp=" + std::to_string(p["dp"].get<int>());
  };
  const std::string what = job + "/" + step + " " + par(j["from"]) + " -> " + par(j["to"]);
  if (j.contains("chunks")) {
    const json& c = j["chunks"];
    fmt::print("chunks: {} of {} tensors ({} of {}) are each rank's exactly at tp={}\n", c["exact"].get<size_t>(),
               c["tensors"].get<size_t>(), human_bytes(c["bytes_exact"].get<uint64_t>()),
               human_bytes(c["bytes"].get<uint64_t>()), j["to"]["tp"].get<int>());
  }
  auto print_datasets = [&] {
    for (const auto& d : j.value("datasets", json::array())) {
      const uint64_t from_b = d.value("from_global_batch", uint64_t{0}), to_b = d.value("to_global_batch", uint64_t{0});
      fmt::print("  dataset {} {} dp={} -> dp={}{}\n", d["name"].get<std::string>(),
                 dry_run ? "would be re-split" : "re-split", d["from_dp"].get<int>(), d["to_dp"].get<int>(),
                 from_b == to_b ? std::string() : fmt::format(", global batch {} -> {}", from_b, to_b));
    }
  };
  if (j["unchanged"].get<bool>()) {
    fmt::print("{}: already in that configuration, nothing to do\n", what);
    print_datasets();
    return 0;
  }
  fmt::print("{}{}\n", dry_run ? "plan for " : "repartitioned ", what);
  fmt::print("  {} shards, {} tensors, {}\n", j["shards"].get<size_t>(), j["tensors"].get<size_t>(),
             human_bytes(j["bytes_total"].get<uint64_t>()));
  fmt::print("  {} copies -> {} extents: {} remapped without copying, {} compacted ({} slices), {} padding\n",
             j["copies"].get<size_t>(), j["extents"].get<size_t>(), human_bytes(j["bytes_remapped"].get<uint64_t>()),
             human_bytes(j["bytes_compacted"].get<uint64_t>()), j["compacted_slices"].get<size_t>(),
             human_bytes(j["bytes_fill"].get<uint64_t>()));
  if (j.contains("nodes")) {
    fmt::print("  {} moved between nodes (the minimum: {})\n", human_bytes(j["bytes_moved"].get<uint64_t>()),
               human_bytes(j["bytes_min"].get<uint64_t>()));
    for (const auto& n : j["nodes"])
      fmt::print("    {:<10} received {}\n", n["node"].get<std::string>(),
                 human_bytes(n["bytes_received"].get<uint64_t>()));
  } else if (j["bytes_min"].get<uint64_t>() > 0) {
    fmt::print("  {} to move between nodes (the minimum: {})\n", human_bytes(j["bytes_moved"].get<uint64_t>()),
               human_bytes(j["bytes_min"].get<uint64_t>()));
  }
  print_datasets();
  if (!dry_run) fmt::print("  version {} in {:.3f} s\n", j["version"].get<uint64_t>(), j["seconds"].get<double>());
  return 0;
}

// A usage error as every other error: "ptcfs: error: ...", then where help is; exit 2. A
// word that is no command is named, with the commands there are.
int usage_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::string msg = e.what();
  const CLI::App* cmd = &app;
  for (const CLI::App* sub : app.get_subcommands())
    if (sub->parsed()) cmd = sub;
  if (cmd == &app) {
    if (dynamic_cast<const CLI::RequiredError*>(&e) && msg.find("subcommand") != std::string::npos)
      msg = "no command given";
    std::vector<std::string> names;
    std::string list;
    for (const CLI::App* sub : app.get_subcommands({})) {
      names.push_back(sub->get_name());
      list += (list.empty() ? "" : ", ") + sub->get_name();
    }
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--daemon" || a == "--secret-file") {
        ++i;  // its value
        continue;
      }
      if (a.empty() || a[0] == '-') continue;
      if (std::find(names.begin(), names.end(), a) == names.end())
        msg = "unknown command '" + a + "' (commands: " + list + ")";
      break;
    }
    if (msg == "no command given") msg += " (commands: " + list + ")";
  }
  fmt::print(stderr, "ptcfs: error: {}\nRun 'ptcfs{}{} --help' for more information.\n", msg, cmd == &app ? "" : " ",
             cmd == &app ? "" : cmd->get_name());
  return 2;
}

// `ptcfs import`: its options.
struct ImportArgs {
  std::string dir, job, step;
  std::vector<std::string> nodes;
  ImportFormat format;
};

CLI::App* add_import_command(CLI::App& app, ImportArgs& a, Globals& g) {
  auto* imp = app.add_subcommand(
      "import",
      "Import a checkpoint directory (ptc.json + tp{t}-pp{p}.safetensors, or a "
      "Hugging Face safetensors checkpoint with --format hf); DIR may be "
      "s3://BUCKET/PREFIX (--format ptc, hf or dcp: a stock DCP folder; read by the daemon with its --s3-* "
      "access)");
  imp->add_option("--format", a.format.format,
                  "ptc (ptc.json and rank files), hf (Hugging Face safetensors) or dcp (a PyTorch "
                  "Distributed Checkpoint directory: a local one through the Python package, s3:// by the "
                  "daemon); megatron says which "
                  "Python command imports a Megatron-LM checkpoint")
      ->check(CLI::IsMember({"ptc", "hf", "dcp", "megatron"}))
      ->capture_default_str();
  imp->add_option("--template", a.format.template_name,
                  "With --format hf: a shipped PTC template (ptcfs ptc templates) or a template file");
  imp->add_option("--to", a.format.to,
                  "Go straight on to this layout, e.g. tp=2,pp=2,dp=1 (the new step is repartitioned into it; "
                  "--format ptc or hf, or dcp from s3://)");
  imp->add_option("DIR", a.dir, "Checkpoint directory, readable by the daemon")->required();
  imp->add_option("--job", a.job, "Job name")->required();
  imp->add_option("--step", a.step, "Step name (e.g. the iteration)")->required();
  imp->add_option("--nodes", a.nodes,
                  "In a cluster: the node ids to place the ranks on, in order (default: every node). Each node reads "
                  "DIR on its own filesystem; '{node}' in DIR stands for its id")
      ->delimiter(',');
  imp->add_flag("--json", g.json, "Print the result as JSON");
  return imp;
}

// `ptcfs repartition`: its options.
struct RepartitionArgs {
  std::string job, step;
  std::vector<std::string> nodes;
  Target target;
  bool dry_run = false;
};

CLI::App* add_repartition_command(CLI::App& app, RepartitionArgs& a, Globals& g) {
  auto* rep = app.add_subcommand("repartition", "Re-split a step for a new parallel configuration");
  rep->add_option("--job", a.job, "Job name")->required();
  rep->add_option("--step", a.step, "Step name")->required();
  rep->add_option("--to", a.target.to, "New configuration, e.g. tp=2,pp=4,dp=1");
  rep->add_option("--chunks", a.target.chunks,
                  "Instead of --to: a JSON file {\"TENSOR\": [[lo, hi], ...]} of the boxes a job at a new mesh "
                  "will load; the tp whose slices are those boxes is taken, pp and dp kept (docs/FORMATS.md "
                  "\"Layouts from chunks\")");
  rep->add_option("--gpus", a.target.gpus,
                  "Instead of --to: the planner's best configuration for N GPUs (with --model)")
      ->check(ptcfs::cli::non_negative());
  rep->add_option("--model", a.target.model, "MODEL.json for --gpus (docs/PLANNER.md)");
  rep->add_option("--global-batch", a.target.global_batch,
                  "A new global batch for the job's datasets, in the same commit: the sample order continues at "
                  "the samples consumed (docs/FORMATS.md \"A new global batch\"); dp must divide it")
      ->check(ptcfs::cli::positive());
  rep->add_flag("--dry-run", a.dry_run, "Print the plan summary without changing anything");
  rep->add_option("--nodes", a.nodes,
                  "In a cluster: the node ids to place the new ranks on, in order (default: every node); leave out "
                  "a node to shrink, add one to grow")
      ->delimiter(',');
  rep->add_flag("--json", g.json, "Print the result as JSON");
  return rep;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ptcfs: manage a ptcfs tensor store through its daemon (ptcfsd)."};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--daemon, --secret-file) may follow the command too
  Globals g;
  const char* env = std::getenv("PTCFS_DAEMON");
  g.daemon = env && *env ? env : "127.0.0.1:7070";
  app.add_option("--daemon", g.daemon,
                 "Daemon control address HOST:PORT (default: $PTCFS_DAEMON, then 127.0.0.1:7070)");
  const char* sf = std::getenv("PTCFS_SECRET_FILE");
  g.secret_file = sf ? sf : "";
  app.add_option("--secret-file", g.secret_file,
                 "The cluster secret, when the daemon requires it (default: $PTCFS_SECRET_FILE)");
  app.set_version_flag("--version", PTCFS_VERSION);

  std::string path;
  ImportArgs import_args;
  auto* imp = add_import_command(app, import_args, g);
  auto* ls = app.add_subcommand("ls", "List jobs, the steps of a job, the shards of a step, or the step copies in S3");
  ls->add_option("PATH", path,
                 "JOB or JOB/STEP; or s3://BUCKET/PREFIX: the step copies under it (the S3 tier's, `ptcfs export`s), "
                 "read by this command");
  ls->add_flag("--json", g.json, "Print the result as JSON");
  ptcfs::cli::S3Flags ls_s3;
  ptcfs::cli::add_s3_flags(*ls, ls_s3);

  RepartitionArgs rep_args;
  auto* rep = add_repartition_command(app, rep_args, g);

  auto* rm = app.add_subcommand("rm", "Remove a step, committed or still being saved (files open keep reading it)");
  rm->add_option("JOB/STEP", path, "The step")->required();
  rm->add_flag("--json", g.json, "Print the result as JSON");

  auto* status = app.add_subcommand("status", "Show the daemon's state");
  auto* dataset = app.add_subcommand("dataset", "Add datasets, record training progress, list datasets");
  ptcfs::cli::DatasetArgs ds;
  ptcfs::cli::add_dataset_commands(*dataset, ds, g);
  status->add_flag("--json", g.json, "Print the result as JSON");
  ptcfs::cli::PlanArgs plan_args;
  auto* plan = ptcfs::cli::add_plan_command(app, plan_args, g);
  ptcfs::cli::AllocateArgs allocate_args;
  auto* allocate = ptcfs::cli::add_allocate_command(app, allocate_args, g);
  ptcfs::cli::AutoscaleArgs autoscale_args;
  auto* autoscale = ptcfs::cli::add_autoscale_command(app, autoscale_args, g);
  ptcfs::cli::PtcArgs ptc_args;
  auto* ptc_cmd = ptcfs::cli::add_ptc_command(app, ptc_args, g);
  ptcfs::cli::ExportArgs export_args;
  auto* export_cmd = ptcfs::cli::add_export_command(app, export_args, g);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e, argc, argv);
  }
  if (imp->parsed())
    return cmd_import(g, import_args.dir, import_args.job, import_args.step, import_args.nodes, import_args.format);
  if (ptc_cmd->parsed()) return ptcfs::cli::run_ptc_command(*ptc_cmd, ptc_args, g);
  if (export_cmd->parsed()) return ptcfs::cli::run_export(export_args, g);
  if (ls->parsed()) return path.rfind("s3://", 0) == 0 ? cmd_ls_s3(g, path, ls_s3) : cmd_ls(g, path);
  if (rm->parsed()) return cmd_rm(g, path);
  if (status->parsed()) return cmd_status(g);
  if (rep->parsed())
    return cmd_repartition(g, rep_args.job, rep_args.step, rep_args.target, rep_args.dry_run, rep_args.nodes);
  if (plan->parsed()) return ptcfs::cli::run_plan(plan_args, g);
  if (allocate->parsed()) return ptcfs::cli::run_allocate(allocate_args, g);
  if (autoscale->parsed()) return ptcfs::cli::run_autoscale(autoscale_args, g);
  if (dataset->parsed()) return ptcfs::cli::run_dataset_command(*dataset, ds, g);
  return 2;
}
