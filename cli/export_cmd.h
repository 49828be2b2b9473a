// `ptcfs export JOB/STEP --format hf|ptc DIR|s3://BUCKET/PREFIX`: writes a committed step out of ptcfs, reading
// the daemon's mount (so it works for any step a node's mount shows, remote shards included):
// `ptc` copies ptc.json and the rank files (the directory `ptcfs import` reads); `hf` writes
// the full logical tensors as Hugging Face safetensors shards with model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "cli/export_s3.h"

namespace ptcfs::cli {

struct ExportArgs {
  std::string step_path, format, dir, max_shard_size = "5GB", mount;  // format "": hf, or ptc to s3://
  S3Flags s3;
};

CLI::App* add_export_command(CLI::App& app, ExportArgs& a, Globals& g);
// The --s3-endpoint, --s3-region, --s3-credentials and --s3-ca-file options of a command.
void add_s3_flags(CLI::App& cmd, S3Flags& s3);
int run_export(const ExportArgs& a, const Globals& g);

}  // namespace ptcfs::cli
