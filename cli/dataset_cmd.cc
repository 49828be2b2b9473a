#include "cli/dataset_cmd.h"

#include <cstdio>

#include <fmt/core.h>
#include <filesystem>

#include "cli/output.h"
#include "cli/validators.h"

namespace ptcfs::cli {

using nlohmann::json;

void add_dataset_commands(CLI::App& dataset, DatasetArgs& a, Globals& g) {
  dataset.require_subcommand(1);
  a.add = dataset.add_subcommand(
      "add",
      "Index a dataset for a job: its samples are read where they lie (JSONL lines, or Megatron .bin/.idx "
      "sequences) and shown per DP rank under MNT/<job>/data/<name>/");
  a.add->add_option("--job", a.job, "Job name")->required();
  a.add->add_option("--name", a.name, "Dataset name")->required();
  a.add->add_option("--format", a.format, "jsonl or megatron")->required()->check(CLI::IsMember({"jsonl", "megatron"}));
  a.add->add_option("--seed", a.seed, "Seed of the per-epoch sample order")->required()->check(non_negative());
  a.add->add_option("--global-batch", a.global_batch, "Samples per global batch (B)")
      ->required()
      ->check(non_negative());
  a.dp_opt = a.add->add_option("--dp", a.dp, "Data-parallel ranks (default: the dp of the job's checkpoint steps)")
                 ->check(non_negative());
  a.add->add_flag("--copy", a.copy, "Copy the files into the store instead of reading them where they are");
  a.add
      ->add_option("FILES", a.files,
                   "JSONL files, or Megatron datasets as PREFIX, PREFIX.bin or PREFIX.idx; samples are numbered in "
                   "this order")
      ->required();
  a.add->add_flag("--json", g.json, "Print the result as JSON");

  a.progress = dataset.add_subcommand(
      "progress",
      "Record how many samples of the epoch training has consumed (a multiple of the global batch); "
      "the whole epoch starts the next one");
  a.progress->add_option("--job", a.job, "Job name")->required();
  a.progress->add_option("--name", a.name, "Dataset name")->required();
  a.progress->add_option("--consumed", a.consumed, "Samples of the epoch consumed")->required()->check(non_negative());
  a.epoch_opt =
      a.progress->add_option("--epoch", a.epoch, "The epoch (default: the current one); to rewind to a checkpoint")
          ->check(non_negative());
  a.progress_dp = a.progress
                      ->add_option("--dp", a.dp,
                                   "Also split the dataset for this dp from there (a job that changed its mesh "
                                   "without a repartition)")
                      ->check(positive());
  a.progress_batch = a.progress
                         ->add_option("--global-batch", a.global_batch,
                                      "Also take this global batch from there (the order goes on at the "
                                      "consumed count, as with repartition --global-batch)")
                         ->check(positive());
  a.progress->add_flag("--json", g.json, "Print the result as JSON");

  a.ls = dataset.add_subcommand("ls", "List datasets and where training is in each");
  a.ls->add_option("--job", a.job, "Only this job's datasets");
  a.ls->add_flag("--json", g.json, "Print the result as JSON");
}

namespace {

void print_state(const json& d) {
  fmt::print("{}/{}  {}  {} samples ({} per epoch, {} dropped)  batch {}  dp {}  epoch {}  consumed {}\n",
             d["job"].get<std::string>(), d["name"].get<std::string>(), d["format"].get<std::string>(),
             d["num_samples"].get<uint64_t>(), d["samples_per_epoch"].get<uint64_t>(), d["dropped"].get<uint64_t>(),
             d["global_batch"].get<uint64_t>(), d["dp"].get<int>(), d["epoch"].get<uint64_t>(),
             d["consumed"].get<uint64_t>());
}

int add(const DatasetArgs& a, const Globals& g) {
  json files = json::array();
  for (const auto& f : a.files) {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(f, ec);
    if (ec) return fail(invalid(f + ": " + ec.message()));
    files.push_back(abs.lexically_normal().string());
  }
  json req = {{"op", "dataset.add"},       {"job", a.job},   {"name", a.name},
              {"format", a.format},        {"seed", a.seed}, {"global_batch", a.global_batch},
              {"files", std::move(files)}, {"copy", a.copy}};
  if (a.dp_opt->count()) req["dp"] = a.dp;
  ProgressLine line("indexing " + a.job + "/" + a.name);
  auto r = call(g, req, [&](const json& p) {
    if (!g.json) line.update(p.value("done", uint64_t{0}), p.value("total", uint64_t{0}));
  });
  line.finish();
  if (!r) return fail(r.status());
  if (g.json) return print_json(*r);
  fmt::print("added ");
  print_state(*r);
  fmt::print("  {} in {} files{}, indexed in {:.2f} s\n", human_bytes((*r)["bytes"].get<uint64_t>()),
             (*r)["files"].get<size_t>(), (*r)["bytes_copied"].get<uint64_t>() ? ", copied into the store" : "",
             (*r)["seconds"].get<double>());
  return 0;
}

}  // namespace

int run_dataset_command(const CLI::App&, const DatasetArgs& a, const Globals& g) {
  if (a.add->parsed()) return add(a, g);
  if (a.progress->parsed()) {
    json req = {{"op", "dataset.progress"}, {"job", a.job}, {"name", a.name}, {"consumed", a.consumed}};
    if (a.epoch_opt->count()) req["epoch"] = a.epoch;
    if (a.progress_dp->count()) req["dp"] = a.dp;
    if (a.progress_batch->count()) req["global_batch"] = a.global_batch;
    auto r = call(g, req);
    if (!r) return fail(r.status());
    if (g.json) return print_json(*r);
    print_state(*r);
    return 0;
  }
  json req = {{"op", "dataset.ls"}};
  if (!a.job.empty()) req["job"] = a.job;
  auto r = call(g, req);
  if (!r) return fail(r.status());
  if (g.json) return print_json(*r);
  if ((*r)["datasets"].empty()) fmt::print("no datasets\n");
  for (const auto& d : (*r)["datasets"]) print_state(d);
  return 0;
}

}  // namespace ptcfs::cli
