// `ptcfs ptc infer --template NAME DIR`: the ptc.json a PTC template gives a Hugging Face
// checkpoint directory (ptc/formats/ptc_template.h, ptc/formats/hf_checkpoint.h), printed for users to check
// and edit. Reads only the files' headers; needs no daemon.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "ptc/formats/ptc_template.h"

namespace ptcfs::cli {

struct PtcArgs {
  std::string dir, template_name, to = "tp=1,pp=1,dp=1";
  bool list = false;
};

CLI::App* add_ptc_command(CLI::App& app, PtcArgs& a, Globals& g);
int run_ptc_command(CLI::App& cmd, const PtcArgs& a, const Globals& g);

// A shipped template by name, or a template file (a path that exists); with the file's
// text in `text` (sent to the daemon, which may not see the CLI's files).
Result<formats::PtcTemplate> load_template(const std::string& name_or_path, std::string* text = nullptr);

}  // namespace ptcfs::cli
