#include "cli/ptc_cmd.h"

#include <fmt/core.h>

#include <filesystem>
#include <fstream>

#include "ptc/formats/hf_checkpoint.h"
#include "ptc/layout.h"

namespace ptcfs::cli {

using nlohmann::json;

namespace {

// The checkpoint in `dir`, read with the standard library (the CLI has no daemon code).
Result<formats::HfCheckpoint> read_hf(const std::string& dir) {
  auto list = [&]() -> Result<std::vector<std::string>> {
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
    if (ec) return not_found(dir + ": " + ec.message());
    return names;
  };
  auto header = [&](const std::string& name) -> Result<formats::SafetensorsHeader> {
    const std::string path = dir + "/" + name;
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return not_found(path + ": cannot open");
    const auto size = static_cast<uint64_t>(in.tellg());
    auto read_at = [&](uint64_t off, void* buf, size_t len) -> Result<size_t> {
      in.clear();
      in.seekg(static_cast<std::streamoff>(off));
      in.read(static_cast<char*>(buf), static_cast<std::streamsize>(len));
      return static_cast<size_t>(in.gcount());
    };
    return formats::read_safetensors_header(size, read_at, path);
  };
  return formats::read_hf_checkpoint(
      dir, {list, [&](const std::string& name) { return read_text_file(dir + "/" + name); }, header});
}

}  // namespace

Result<formats::PtcTemplate> load_template(const std::string& name_or_path, std::string* text) {
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || std::filesystem::is_regular_file(name_or_path, ec)) {
    PTC_ASSIGN_OR_RETURN(std::string t, read_text_file(name_or_path));
    auto parsed = formats::parse_template_json(t, name_or_path);
    if (parsed && text) *text = std::move(t);
    return parsed;
  }
  return formats::builtin_template(name_or_path);
}

CLI::App* add_ptc_command(CLI::App& app, PtcArgs& a, Globals& g) {
  auto* ptc_cmd = app.add_subcommand("ptc", "PTC templates: infer a checkpoint's ptc.json (docs/FORMATS.md)");
  ptc_cmd->require_subcommand(1);
  auto* infer = ptc_cmd->add_subcommand(
      "infer",
      "Print the ptc.json a template gives a Hugging Face checkpoint directory (model.safetensors, or "
      "shards with model.safetensors.index.json); reads only the headers; needs no daemon");
  infer->add_option("DIR", a.dir, "The checkpoint directory")->required();
  infer
      ->add_option("--template", a.template_name,
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
    for (const auto& name : formats::builtin_template_names()) {
      auto t = formats::builtin_template(name);
      if (!t) return fail(t.status());
      json rules = json::array();
      for (const auto& r : t->rules) rules.push_back(formats::rule_to_json(r));
      out.push_back({{"name", t->name}, {"description", t->description}, {"rules", std::move(rules)}});
    }
    if (g.json) return print_json(out);
    for (const auto& t : out)
      fmt::print("{:<16} {}\n", t["name"].get<std::string>(), t["description"].get<std::string>());
    return 0;
  }
  auto tmpl = load_template(a.template_name);
  if (!tmpl) return fail(tmpl.status());
  auto parallelism = ptc::parse_parallelism(a.to);
  if (!parallelism) return fail(parallelism.status().with_context("--to"));
  auto ck = read_hf(a.dir);
  if (!ck) return fail(ck.status());
  auto p = formats::infer_ptc(*tmpl, ck->infos(), *parallelism, a.dir, ck->config ? &*ck->config : nullptr);
  if (!p) return fail(p.status());
  // The shapes must split evenly at --to: the layout says where they do not.
  if (auto layout = ptc::Layout::make(*p, *parallelism); !layout)
    return fail(layout.status().with_context(a.dir + " at " + parallelism->to_string()));
  fmt::print("{}", ptc::ptc_to_json(*p));
  return 0;
}

}  // namespace ptcfs::cli
