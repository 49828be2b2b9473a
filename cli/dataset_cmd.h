// `ptcfs dataset add | progress | ls`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/client.h"

namespace ptcfs::cli {

struct DatasetArgs {
  std::string job, name, format;
  uint64_t seed = 0, global_batch = 0, consumed = 0, epoch = 0;
  int dp = 0;
  bool copy = false;
  std::vector<std::string> files;
  CLI::App* add = nullptr;
  CLI::App* progress = nullptr;
  CLI::App* ls = nullptr;
  CLI::Option* dp_opt = nullptr;
  CLI::Option* epoch_opt = nullptr;
  CLI::Option* progress_dp = nullptr;
  CLI::Option* progress_batch = nullptr;
};

void add_dataset_commands(CLI::App& dataset, DatasetArgs& a, Globals& g);
int run_dataset_command(const CLI::App& dataset, const DatasetArgs& a, const Globals& g);

}  // namespace ptcfs::cli
