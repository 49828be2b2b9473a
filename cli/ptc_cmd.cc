#include "cli/ptc_cmd.h"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "ptc/hf_checkpoint.h"
#include "ptc/layout.h"

namespace ptcfs::cli {

using nlohmann::json;

namespace {

// The header of a safetensors file (its first 8 + N bytes, parsed).
ptc::Result<ptc::SafetensorsHeader> read_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ptc::not_found(path + ": cannot open");
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  std::string first8(8, '\0');
  in.read(first8.data(), 8);
  first8.resize(static_cast<size_t>(in.gcount()));
  PTC_ASSIGN_OR_RETURN(uint64_t n, ptc::safetensors_header_len(first8, size, path));
  std::string prefix(8 + n, '\0');
  in.seekg(0);
  in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  prefix.resize(static_cast<size_t>(in.gcount()));
  return ptc::parse_safetensors(prefix, size, path);
}

ptc::Result<std::vector<ptc::TensorInfo>> hf_tensor_infos(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> listing;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) listing.push_back(e.path().filename().string());
  if (ec) return ptc::not_found(dir + ": " + ec.message());
  std::optional<std::string> index;
  if (std::find(listing.begin(), listing.end(), ptc::kHfIndexFile) != listing.end()) {
    PTC_ASSIGN_OR_RETURN(index, read_text_file(dir + "/" + ptc::kHfIndexFile));
  }
  PTC_ASSIGN_OR_RETURN(auto names, ptc::hf_file_names(listing, index, dir));
  std::vector<ptc::HfFile> files;
  for (const auto& n : names) {
    PTC_ASSIGN_OR_RETURN(auto header, read_header(dir + "/" + n));
    files.push_back({n, std::move(header)});
  }
  PTC_ASSIGN_OR_RETURN(auto tensors, ptc::hf_tensors(files, index, dir));
  std::vector<ptc::TensorInfo> out;
  for (auto& t : tensors) out.push_back(std::move(t.info));
  return out;
}

}  // namespace

ptc::Result<ptc::PtcTemplate> load_template(const std::string& name_or_path, std::string* text) {
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || std::filesystem::is_regular_file(name_or_path, ec)) {
    PTC_ASSIGN_OR_RETURN(std::string t, read_text_file(name_or_path));
    auto parsed = ptc::parse_template_json(t, name_or_path);
    if (parsed && text) *text = std::move(t);
    return parsed;
  }
  return ptc::builtin_template(name_or_path);
}

CLI::App* add_ptc_command(CLI::App& app, PtcArgs& a, Globals& g) {
  auto* ptc_cmd = app.add_subcommand("ptc", "PTC templates: infer a checkpoint's ptc.json (docs/FORMATS.md)");
  ptc_cmd->require_subcommand(1);
  auto* infer = ptc_cmd->add_subcommand(
      "infer", "Print the ptc.json a template gives a Hugging Face checkpoint directory (model.safetensors, or "
               "shards with model.safetensors.index.json); reads only the headers; needs no daemon");
  infer->add_option("DIR", a.dir, "The checkpoint directory")->required();
  infer->add_option("--template", a.template_name,
                    "A shipped template (llama, gpt2, neox, megatron-gpt, megatron-swiglu) or a template file")
      ->required();
  infer->add_option("--to", a.to, "The parallel configuration to write and check the shapes against")
      ->capture_default_str();
  auto* templates = ptc_cmd->add_subcommand("templates", "List the shipped templates");
  templates->add_flag("--json", g.json, "Print them as JSON (name, description, rules)");
  return ptc_cmd;
}

int run_ptc_command(CLI::App& cmd, const PtcArgs& a, const Globals& g) {
  if (cmd.got_subcommand("templates")) {
    json out = json::array();
    for (const auto& name : ptc::builtin_template_names()) {
      auto t = ptc::builtin_template(name);
      if (!t) return fail(t.status());
      json rules = json::array();
      for (const auto& r : t->rules) {
        json j = r.fields;
        j["match"] = r.match;
        if (r.skip) j["skip"] = true;
        rules.push_back(std::move(j));
      }
      out.push_back({{"name", t->name}, {"description", t->description}, {"rules", std::move(rules)}});
    }
    if (g.json) return print_json(out);
    for (const auto& t : out) fmt::print("{:<16} {}\n", t["name"].get<std::string>(), t["description"].get<std::string>());
    return 0;
  }
  auto tmpl = load_template(a.template_name);
  if (!tmpl) return fail(tmpl.status());
  auto parallelism = ptc::parse_parallelism(a.to);
  if (!parallelism) return fail(parallelism.status().with_context("--to"));
  auto infos = hf_tensor_infos(a.dir);
  if (!infos) return fail(infos.status());
  auto p = ptc::infer_ptc(*tmpl, *infos, *parallelism, a.dir);
  if (!p) return fail(p.status());
  // The shapes must split evenly at --to: the layout says where they do not.
  if (auto layout = ptc::Layout::make(*p, *parallelism); !layout)
    return fail(layout.status().with_context(a.dir + " at " + parallelism->to_string()));
  fmt::print("{}", ptc::ptc_to_json(*p));
  return 0;
}

}  // namespace ptcfs::cli
