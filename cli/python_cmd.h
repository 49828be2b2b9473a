// Commands that the Python package carries out (`python3 -m ptcfs ...`, docs/PYTHON.md): reading
// formats that need torch, such as PyTorch Distributed Checkpoint. The CLI replaces itself (exec)
// with the interpreter $PTCFS_PYTHON, else `python3` on PATH, passing the daemon's address, the
// secret file and --json along, so that `ptcfs import --format dcp` and `python3 -m ptcfs
// import-dcp` are one command.
#pragma once

#include <string>
#include <vector>

#include "cli/client.h"

namespace ptcfs::cli {

// Runs `PY -m ptcfs ARGS... [--daemon D] [--secret-file F] [--json]`; returns only when it could not
// start it (exit code 1, with what to install).
int exec_python(const Globals& g, const std::vector<std::string>& args, bool with_daemon);

}  // namespace ptcfs::cli
