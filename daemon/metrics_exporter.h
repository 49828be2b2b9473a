// Serves the metrics facade's registry (ptc/base/metrics.h) and the node's state gauges as
// Prometheus text at http://ADDR/metrics (ptcfsd --metrics ADDR), through prometheus-cpp's
// exposer. The gauges are read at each scrape. http://ADDR/healthz answers "ok" at once, for
// probes (docs/OPERATIONS.md "Health"): it reads no gauge.
// Thread-safety: scrapes run on the exposer's own threads and call the gauge source there, at
// any time until the exporter is destroyed (destroy it before what the source reads). start()
// fails with kInvalidArgument (not HOST:PORT) or kUnavailable (cannot listen there).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs {

// One gauge sample taken at scrape time.
struct GaugeSample {
  std::string name, help;
  std::map<std::string, std::string> labels;
  double value = 0;
};

class MetricsExporter {
 public:
  // Listens on ADDR (HOST:PORT); `gauges` is called at every scrape.
  static Result<std::unique_ptr<MetricsExporter>> start(const std::string& addr,
                                                        std::function<std::vector<GaugeSample>()> gauges);
  virtual ~MetricsExporter() = default;
  // HOST:PORT it listens on (the port chosen when ADDR gave 0).
  virtual std::string address() const = 0;
};

}  // namespace ptcfs
