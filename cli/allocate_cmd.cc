#include "cli/allocate_cmd.h"

#include <fmt/core.h>

#include "ptc/allocator.h"

namespace ptcfs::cli {

using nlohmann::json;

CLI::App* add_allocate_command(CLI::App& app, AllocateArgs& a, Globals& g) {
  auto* cmd = app.add_subcommand(
      "allocate", "Divide N GPUs among jobs (JOBS.json: each a GPU range and measured throughput or a MODEL.json) "
                  "to maximise their total samples/s (docs/PLANNER.md); needs no daemon");
  cmd->add_option("--jobs", a.jobs_file, "JOBS.json")->required();
  cmd->add_option("--gpus", a.gpus, "Number of GPUs (N)")->required();
  cmd->add_option("--policy", a.policy, "throughput: Saxena et al.'s dynamic program (the only policy so far)")
      ->check(CLI::IsMember({"throughput"}));
  cmd->add_flag("--json", g.json, "Print the allocation as JSON");
  return cmd;
}

namespace {

std::string config_text(const ptc::JobOption& o) {
  if (!o.config) return "";
  return fmt::format("tp={},pp={},dp={},micro_batch={}", o.config->tp, o.config->pp, o.config->dp,
                     o.config->micro_batch);
}

}  // namespace

int run_allocate(const AllocateArgs& a, const Globals& g) {
  auto text = read_text_file(a.jobs_file);
  if (!text) return fail(text.status());
  auto jobs = ptc::parse_jobs_json(*text, a.jobs_file);
  if (!jobs) return fail(jobs.status());
  auto r = ptc::allocate_throughput(*jobs, a.gpus);
  if (!r) return fail(r.status().with_context(a.jobs_file));
  const ptc::Allocation& alloc = *r;
  if (g.json) {
    json out = {{"policy", a.policy},
                {"gpus", a.gpus},
                {"gpus_used", alloc.gpus_used},
                {"samples_per_s", alloc.samples_per_s},
                {"jobs", json::array()}};
    for (const auto& j : alloc.jobs) {
      json e = {{"name", j.name}, {"queued", j.queued}, {"gpus", j.option.gpus}, {"samples_per_s", j.option.samples_per_s}};
      if (j.option.config)
        e["config"] = {{"tp", j.option.config->tp},
                       {"pp", j.option.config->pp},
                       {"dp", j.option.config->dp},
                       {"micro_batch", j.option.config->micro_batch}};
      out["jobs"].push_back(std::move(e));
    }
    return print_json(out);
  }
  fmt::print("{} on {} GPUs ({}): {} used, {:.6g} samples/s in all\n", a.jobs_file, a.gpus, a.policy, alloc.gpus_used,
             alloc.samples_per_s);
  fmt::print("{:<20} {:>6} {:>12}  {}\n", "job", "gpus", "samples/s", "configuration");
  for (const auto& j : alloc.jobs) {
    if (j.queued)
      fmt::print("{:<20} {:>6} {:>12}  {}\n", j.name, 0, "-", "queued (its smallest count does not fit)");
    else
      fmt::print("{:<20} {:>6} {:>12.6g}  {}\n", j.name, j.option.gpus, j.option.samples_per_s, config_text(j.option));
  }
  return 0;
}

}  // namespace ptcfs::cli
