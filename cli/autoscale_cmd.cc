#include "cli/autoscale_cmd.h"

#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <map>

#include "cli/allocate_cmd.h"
#include "cli/autoscale/controller.h"
#include "cli/validators.h"
#include "ptc/planner/autoscale.h"

namespace ptcfs::cli {

using nlohmann::json;
using transport::EtcdClient;

CLI::App* add_autoscale_command(CLI::App& app, AutoscaleArgs& a, Globals& g) {
  auto* cmd = app.add_subcommand(
      "autoscale",
      "Run the controller of a job queue in etcd: on each submit, finish or capacity change, decide every job's "
      "GPUs, global batch and (tp, pp, dp) again, repartition each changed job's latest step and write its "
      "decision for its launcher (docs/PLANNER.md \"The autoscaler\"); one controller at a time");
  cmd->add_option("--etcd", a.etcd, "etcd endpoints, comma-separated http(s)://HOST:PORT")->required();
  cmd->add_option("--etcd-ca", a.tls.ca_file, "With https:// --etcd: the CA of etcd's certificate (PEM)");
  cmd->add_option("--etcd-cert", a.tls.cert_file, "With https:// --etcd: this client's certificate (PEM)");
  cmd->add_option("--etcd-key", a.tls.key_file, "With https:// --etcd: the key of --etcd-cert (PEM)");
  cmd->add_option("--gpus", a.gpus, "GPUs to divide when <prefix>/capacity is absent")
      ->required()
      ->check(non_negative());
  cmd->add_option("--policy", a.policy, "throughput (Saxena et al.) or makespan (Saturn; jobs need 'samples')")
      ->check(CLI::IsMember({"throughput", "makespan"}));
  cmd->add_option("--prefix", a.prefix, "The etcd prefix of the queue, capacity, decisions and leader")
      ->capture_default_str();
  cmd->add_option("--id", a.id, "This controller's name in <prefix>/leader and in its decisions (default HOST:PID)");
  cmd->add_option("--lease-ttl", a.lease_ttl_s, "Seconds a crashed controller keeps the lead before a standby takes it")
      ->check(CLI::Range(2, 3600))
      ->capture_default_str();
  cmd->add_option("--retry", a.retry_s, "Seconds before a pass that failed somewhere is tried again")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--time-limit", a.time_limit_s, "makespan: seconds the solver may search")
      ->check(CLI::Range(0.01, 86400.0));
  cmd->add_option("--slots", a.slots, "makespan: time slots of the program")->check(CLI::Range(2, 100000));
  cmd->add_option("--horizon", a.horizon_s,
                  "throughput: weigh moves over this many seconds: a running job whose entry gives move_seconds "
                  "counts any other option at 1 - move_seconds / SECONDS of its samples/s (docs/PLANNER.md)")
      ->check(CLI::Range(1e-3, 1e9));
  cmd->add_flag("--once", a.once, "One pass, then exit (1 when something was not carried out, or another leads)");
  cmd->add_flag("--json", g.json,
                "Print each decision written, and each unreadable queue entry, one JSON object a line");
  return cmd;
}

int run_autoscale(const AutoscaleArgs& args, const Globals& g) {
  AutoscaleArgs a = args;
  if (a.prefix.empty() || a.prefix.back() == '/') return fail(invalid("--prefix must not be empty or end in '/'"));
  if (a.horizon_s > 0 && a.policy != "throughput")
    return fail(invalid("--horizon weighs moves for --policy throughput; the makespan program plans whole runs"));
  if (a.id.empty()) {
    char host[256] = {};
    (void)gethostname(host, sizeof host - 1);
    a.id = fmt::format("{}:{}", host, getpid());
  }
  auto etcd = EtcdClient::make(a.etcd, std::chrono::seconds(2), a.tls);
  if (!etcd) return fail(etcd.status());
  const ControllerOptions options{a.prefix, a.id, a.policy, a.gpus, a.lease_ttl_s, a.retry_s};
  // The policy (ptc/planner/autoscale.h): throughput, or makespan through the MILP solver.
  auto decide = [a](const std::vector<planner::QueueEntry>& queue, int gpus,
                    const std::map<std::string, planner::Decision>& stored) -> Result<std::vector<planner::Decision>> {
    if (a.policy == "throughput") return planner::decide_throughput(queue, gpus, stored, a.horizon_s);
    std::vector<planner::JobSpec> specs = planner::autoscale_specs(queue);
    const auto options = planner::fitting_options(specs, gpus);
    specs.resize(options.size());
    if (specs.empty()) return planner::decisions_from(queue, {});
    PTC_ASSIGN_OR_RETURN(auto timed, planner::timed_options(specs, options), "makespan policy");
    PTC_ASSIGN_OR_RETURN(auto solved, solve_makespan(specs, timed, gpus, a.slots, a.time_limit_s), "makespan policy");
    return planner::decisions_from(queue, planner::starting_now(solved.schedule));
  };
  auto call_daemon = [g](const std::string& daemon, const json& req) {
    Globals at = g;
    at.daemon = daemon;
    return call(at, req);
  };
  Controller::Print print;
  if (g.json)
    print = [](const std::string& line) {
      fmt::print("{}\n", line);
      std::fflush(stdout);
    };
  Controller c(options, std::move(*etcd), decide, call_daemon, print);
  if (!a.once) {
    c.serve();
    return 0;
  }
  auto done = c.once();
  if (!done) return fail(done.status());
  return *done ? 0 : 1;
}

}  // namespace ptcfs::cli
