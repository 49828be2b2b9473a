// The CLI's connection to the daemon: global flags, one request per command, errors.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "transport/rpc.h"

namespace ptcfs::cli {

struct Globals {
  std::string daemon;
  std::string secret_file;
  bool json = false;
};

// Prints "ptcfs: error: <message>" to stderr; returns the exit code 1.
int fail(const Status& s);
// Sends one request to the daemon and waits for its result.
Result<nlohmann::json> call(const Globals& g, const nlohmann::json& req, const transport::ProgressSink& progress = {});
// The contents of a file the user named (MODEL.json, JOBS.json); kInvalidArgument naming it
// when it cannot be read.
// At most max_bytes (more is refused after reading max_bytes + 1: a device or a huge file).
Result<std::string> read_text_file(const std::string& path, size_t max_bytes = size_t{64} << 20);
// Prints JSON (two-space indent); returns 0.
int print_json(const nlohmann::json& j);

}  // namespace ptcfs::cli
