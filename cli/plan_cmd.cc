#include "cli/plan_cmd.h"

#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include <fmt/core.h>

#include "cli/output.h"
#include "cli/validators.h"
#include "ptc/base/json_util.h"
#include "ptc/planner/planner.h"

namespace ptcfs::cli {

using nlohmann::json;

CLI::App* add_plan_command(CLI::App& app, PlanArgs& a, Globals& g) {
  auto* plan = app.add_subcommand(
      "plan",
      "Rank every (tp, pp, dp, micro-batch) of a model on N GPUs that fits in memory by predicted step "
      "time (docs/PLANNER.md); needs no daemon unless --from is given");
  plan->add_option("--model", a.model_file, "MODEL.json: the transformer and its GPUs")->required();
  plan->add_option("--gpus", a.gpus, "Number of GPUs (N)")->required()->check(non_negative());
  a.gpus_per_node_opt =
      plan->add_option("--gpus-per-node", a.gpus_per_node, "GPUs per node (default: the model's gpu.per_node)")
          ->check(non_negative());
  plan->add_option("--top", a.top, "Show the K best (default: 10 in the table, all with --json; 0: all)")
      ->check(non_negative());
  plan->add_option("--from", a.from,
                   "JOB/STEP: add, per candidate, the bytes a repartition of that step into its tp, pp, dp would "
                   "move between nodes (a dry run on the daemon)");
  plan->add_option("--horizon-steps", a.horizon,
                   "With --from: rank by step time plus the move's time spread over this many steps (the move at "
                   "one node's inter-node bandwidth: bytes x 8 / (inter_node_gbps x per_node))")
      ->check(non_negative());
  plan->add_flag("--json", g.json, "Print the candidates as a JSON list, best first");
  return plan;
}

namespace {

// What a dry-run repartition of a step into candidates' (tp, pp, dp) would move, asked of the
// daemon once per configuration.
class MoveAsker {
 public:
  // What the daemon said of one configuration: the bytes, or why the step cannot be laid out
  // there (a tp that does not divide a tensor's heads or its split dimension, more stages than
  // layers: the daemon's invalid_argument).
  struct Move {
    std::optional<uint64_t> bytes;
    std::string refused;
  };

  static Result<MoveAsker> make(const Globals& g, const std::string& from) {
    const size_t slash = from.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == from.size() ||
        from.find('/', slash + 1) != std::string::npos)
      return invalid("--from '" + from + "' is not JOB/STEP");
    return MoveAsker(g, from, from.substr(0, slash), from.substr(slash + 1));
  }

  Result<Move> ask(const planner::Candidate& c) {
    Move m;
    // A stored step gives every rank whole sequences (docs/FORMATS.md): no layout for cp.
    if (c.config.cp > 1) {
      m.refused = "cp=" + std::to_string(c.config.cp) + ": a repartitioned step has no context parallelism";
      return m;
    }
    const std::string to = fmt::format("tp={},pp={},dp={}", c.config.tp, c.config.pp, c.config.dp);
    auto it = asked_.find(to);
    if (it != asked_.end()) return it->second;
    auto r = call(g_, {{"op", "repartition"}, {"job", job_}, {"step", step_}, {"to", to}, {"dry_run", true}});
    if (r) {
      PTC_ASSIGN_OR_RETURN(m.bytes, member_u64(*r, "bytes_moved", "reply"));
    } else if (r.status().code() == Code::kInvalidArgument) {
      m.refused = r.status().message();
    } else {
      return r.status().with_context("dry run of repartitioning " + from_ + " to " + to);
    }
    return asked_.emplace(to, std::move(m)).first->second;
  }

 private:
  MoveAsker(const Globals& g, std::string from, std::string job, std::string step)
      : g_(g), from_(std::move(from)), job_(std::move(job)), step_(std::move(step)) {}
  const Globals& g_;
  std::string from_, job_, step_;
  std::map<std::string, Move> asked_;  // by "tp=..,pp=..,dp=.."
};

// The candidates (in order) that `from` can be laid out at, with the bytes each move takes, at
// most `keep` of them (0: all). Each configuration the daemon refused is told on stderr; when
// it refuses every one, that is the error.
Result<std::pair<std::vector<planner::Candidate>, std::vector<uint64_t>>> movable(
    const Globals& g, const std::string& from, const std::vector<planner::Candidate>& cands, size_t keep) {
  PTC_ASSIGN_OR_RETURN(MoveAsker asker, MoveAsker::make(g, from));
  std::vector<planner::Candidate> kept;
  std::vector<uint64_t> moved;
  std::map<std::string, std::string> refused;
  for (const auto& c : cands) {
    if (keep > 0 && kept.size() == keep) break;
    PTC_ASSIGN_OR_RETURN(MoveAsker::Move m, asker.ask(c));
    if (m.bytes) {
      kept.push_back(c);
      moved.push_back(*m.bytes);
    } else {
      refused.emplace(fmt::format("tp={},{}pp={},dp={}", c.config.tp,
                                  c.config.cp > 1 ? fmt::format("cp={},", c.config.cp) : "", c.config.pp, c.config.dp),
                      m.refused);
    }
  }
  if (kept.empty() && !refused.empty())
    return invalid("no candidate can hold " + from + ": " + refused.begin()->first + ": " + refused.begin()->second);
  for (const auto& [to, why] : refused)
    fmt::print(stderr, "ptcfs: skipped {}, where {} cannot be laid out: {}\n", to, from, why);
  return std::pair{std::move(kept), std::move(moved)};
}

void print_table(const PlanArgs& a, const planner::ModelSpec& m, size_t valid, size_t fit,
                 const std::vector<planner::Candidate>& shown, const std::vector<uint64_t>& moved) {
  fmt::print("{} on {} GPUs ({} per node, {:g} GiB each): {} of {} valid configurations fit; {}\n", a.model_file,
             a.gpus, m.gpu.per_node, m.gpu.memory_gb, fit, valid,
             shown.size() == fit ? "best first" : fmt::format("the {} best", shown.size()));
  // The context-parallel columns only where the model may choose cp > 1.
  const bool cp = m.context_parallel;
  fmt::print("{:>4} {:>3}{} {:>4} {:>3} {:>5} {:>5}  {:>10}  {:>9}  {:>8}   {:>8} {:>8} {:>8}{} {:>8} {:>8} {:>9}{}\n",
             "rank", "tp", cp ? fmt::format(" {:>3}", "cp") : "", "pp", "v", "dp", "micro", "memory/GPU", "step",
             "TFLOP/s", "compute", "bubble", "tp comm", cp ? fmt::format(" {:>8}", "cp comm") : "", "pp comm",
             "dp comm", "optimizer", moved.empty() ? "" : fmt::format("  {:>10}", "moves"));
  for (size_t i = 0; i < shown.size(); ++i) {
    const planner::Candidate& c = shown[i];
    fmt::print(
        "{:>4} {:>3}{} {:>4} {:>3} {:>5} {:>5}  {:>6.2f} GiB  {:>7.4g} s  {:>8.1f}   {:>8.4g} {:>8.4g} {:>8.4g}{} "
        "{:>8.4g} {:>8.4g} {:>9.4g}{}\n",
        i + 1, c.config.tp, cp ? fmt::format(" {:>3}", c.config.cp) : "", c.config.pp, c.config.virtual_stages,
        c.config.dp, c.config.micro_batch, c.memory_gb(), c.step_seconds(), c.tflops_per_gpu(), c.step.compute,
        c.step.bubble, c.step.tp_comm, cp ? fmt::format(" {:>8.4g}", c.step.cp_comm) : "", c.step.pp_comm,
        c.step.dp_comm, c.step.optimizer, moved.empty() ? "" : fmt::format("  {:>10}", human_bytes(moved[i])));
  }
  fmt::print("(seconds per step of {} sequences; TFLOP/s per GPU counts recomputation)\n", m.global_batch);
}

}  // namespace

namespace {
Result<planner::ModelSpec> load_model(const std::string& model_file) {
  PTC_ASSIGN_OR_RETURN(std::string text, read_text_file(model_file));
  return planner::parse_model_json(text, model_file);
}
}  // namespace

json config_json(const planner::ParallelConfig& c) {
  return {{"tp", c.tp},
          {"cp", c.cp},
          {"pp", c.pp},
          {"dp", c.dp},
          {"micro_batch", c.micro_batch},
          {"virtual_stages", c.virtual_stages}};
}

json candidate_json(const planner::Candidate& c) {
  json j = config_json(c.config);
  j["memory_gb"] = c.memory_gb();
  j["step_seconds"] = c.step_seconds();
  j["tflops_per_gpu"] = c.tflops_per_gpu();
  return j;
}

Result<planner::Candidate> best_plan(const std::string& model_file, int gpus) {
  PTC_ASSIGN_OR_RETURN(planner::ModelSpec m, load_model(model_file));
  // Only configurations a repartitioned step can hold are targets.
  PTC_ASSIGN_OR_RETURN(std::vector<planner::Candidate> plan, planner::plan_parallelism(planner::as_stored(m), gpus),
                       model_file);
  return plan.front();  // plan_parallelism refuses an empty plan
}

int run_plan(const PlanArgs& a, const Globals& g) {
  auto model = load_model(a.model_file);
  if (!model) return fail(model.status());
  planner::ModelSpec m = *model;
  if (a.gpus_per_node_opt->count() > 0) {
    if (a.gpus_per_node < 1 || a.gpus_per_node > planner::kMaxPerNode)
      return fail(invalid("--gpus-per-node must be 1 to " + std::to_string(planner::kMaxPerNode) + " (got " +
                          std::to_string(a.gpus_per_node) + ")"));
    m.gpu.per_node = a.gpus_per_node;
  }
  if (a.top < -1) return fail(invalid("--top must be at least 0"));
  if (a.horizon < 0) return fail(invalid("--horizon-steps must be at least 0"));
  if (a.horizon > 0 && a.from.empty()) return fail(invalid("--horizon-steps needs --from JOB/STEP"));
  auto plan = planner::plan_parallelism(m, a.gpus);
  if (!plan) return fail(plan.status().with_context(a.model_file));
  std::vector<planner::Candidate> all = *plan;
  const size_t fit = all.size();
  size_t keep = all.size();
  if (a.top > 0) keep = std::min(keep, static_cast<size_t>(a.top));
  if (a.top == -1 && !g.json) keep = std::min<size_t>(keep, 10);

  // With a horizon every candidate's move counts in its rank, so all are asked about; without,
  // the best `keep` that the step can be laid out at.
  std::vector<uint64_t> moved;
  std::vector<double> move_s;
  if (!a.from.empty()) {
    auto r = movable(g, a.from, all, a.horizon > 0 ? 0 : keep);
    if (!r) return fail(r.status());
    std::tie(all, moved) = std::move(*r);
    keep = std::min(keep, all.size());
  }
  if (a.horizon > 0) {
    const double node_bytes_per_s = m.gpu.inter_node_gbps * 1e9 / 8 * m.gpu.per_node;
    std::vector<size_t> order(all.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto score = [&](size_t i) { return all[i].step_seconds() + moved[i] / node_bytes_per_s / a.horizon; };
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return score(x) < score(y); });
    std::vector<planner::Candidate> ranked;
    std::vector<uint64_t> ranked_moved;
    for (size_t i : order) {
      ranked.push_back(all[i]);
      ranked_moved.push_back(moved[i]);
      move_s.push_back(moved[i] / node_bytes_per_s);
    }
    all = std::move(ranked);
    moved = std::move(ranked_moved);
    move_s.resize(keep);
  }
  moved.resize(std::min(moved.size(), keep));
  const std::vector<planner::Candidate> shown(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep));
  if (!g.json) {
    print_table(a, m, planner::valid_configs(m, a.gpus).size(), fit, shown, moved);
    if (a.horizon > 0)
      fmt::print("(ranked by step time + the move's time / {} steps, the move at one node's links, {:g} Gbit/s)\n",
                 a.horizon, m.gpu.inter_node_gbps * m.gpu.per_node);
    return 0;
  }
  json out = json::array();
  for (size_t i = 0; i < shown.size(); ++i) {
    const planner::Candidate& c = shown[i];
    json j = candidate_json(c);
    if (!moved.empty()) j["bytes_moved"] = moved[i];
    if (!move_s.empty()) {
      j["move_seconds"] = move_s[i];
      j["score_seconds"] = c.step_seconds() + move_s[i] / static_cast<double>(a.horizon);
    }
    out.push_back(std::move(j));
  }
  return print_json(out);
}

}  // namespace ptcfs::cli
