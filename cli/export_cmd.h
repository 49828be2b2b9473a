// `ptcfs export JOB/STEP --format hf|ptc DIR`: writes a committed step out of ptcfs, reading
// the daemon's mount (so it works for any step a node's mount shows, remote shards included):
// `ptc` copies ptc.json and the rank files (the directory `ptcfs import` reads); `hf` writes
// the full logical tensors as Hugging Face safetensors shards with model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/client.h"

namespace ptcfs::cli {

struct ExportArgs {
  std::string step_path, format = "hf", dir, max_shard_size = "5GB", mount;
};

CLI::App* add_export_command(CLI::App& app, ExportArgs& a, Globals& g);
int run_export(const ExportArgs& a, const Globals& g);

}  // namespace ptcfs::cli
