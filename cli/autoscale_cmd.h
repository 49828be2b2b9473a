// `ptcfs autoscale`: the controller of a job queue in etcd (docs/PLANNER.md "The autoscaler").
// One controller at a time holds <prefix>/leader under a lease; on every change of the queue
// or of the capacity it decides again (ptc/planner/autoscale.h) and carries out each changed
// decision: the job's latest step repartitioned through its daemon, then <prefix>/decision/<job>
// written, which the job's launcher watches.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "transport/etcd_client.h"

namespace ptcfs::cli {

struct AutoscaleArgs {
  std::string etcd;
  transport::EtcdTls tls;
  int gpus = 0;  // the capacity when <prefix>/capacity is absent
  std::string policy = "throughput";
  std::string prefix = "/ptcfs-autoscale";
  std::string id;  // default: HOSTNAME:PID
  int lease_ttl_s = 5;
  double retry_s = 5;        // a pass that failed somewhere is tried again after this long
  double time_limit_s = 10;  // makespan: the solver's limit
  int slots = 40;            // makespan: slots of the program
  double horizon_s = 0;      // throughput: weigh running jobs' moves over this many seconds (0: not)
  bool once = false;
};

CLI::App* add_autoscale_command(CLI::App& app, AutoscaleArgs& a, Globals& g);
int run_autoscale(const AutoscaleArgs& a, const Globals& g);

}  // namespace ptcfs::cli
