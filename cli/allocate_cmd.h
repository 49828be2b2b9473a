// `ptcfs allocate`: divides N GPUs among the jobs of a JOBS.json (ptc/allocator.h), printed as
// a table or as JSON. Needs no daemon.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/client.h"

namespace ptcfs::cli {

struct AllocateArgs {
  std::string jobs_file;
  int gpus = 0;
  std::string policy = "throughput";
};

CLI::App* add_allocate_command(CLI::App& app, AllocateArgs& a, Globals& g);
int run_allocate(const AllocateArgs& a, const Globals& g);

}  // namespace ptcfs::cli
