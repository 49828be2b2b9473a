#include "daemon/metrics_exporter.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <exception>

#include "ptc/metrics.h"

namespace ptcfs {

namespace {

// The scrape-time gauges as metric families (one family per name, samples in given order).
class Gauges final : public prometheus::Collectable {
 public:
  explicit Gauges(std::function<std::vector<GaugeSample>()> fn) : fn_(std::move(fn)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    for (auto& g : fn_()) {
      if (out.empty() || out.back().name != g.name)
        out.push_back(prometheus::MetricFamily{g.name, g.help, prometheus::MetricType::Gauge, {}});
      prometheus::ClientMetric m;
      for (auto& [k, v] : g.labels) m.label.push_back({k, v});
      m.gauge.value = g.value;
      out.back().metric.push_back(std::move(m));
    }
    return out;
  }

 private:
  std::function<std::vector<GaugeSample>()> fn_;
};

class Exporter final : public MetricsExporter {
 public:
  Exporter(std::unique_ptr<prometheus::Exposer> exposer, std::shared_ptr<Gauges> gauges, std::string host)
      : exposer_(std::move(exposer)), gauges_(std::move(gauges)), host_(std::move(host)) {
    exposer_->RegisterCollectable(ptc::metrics::registry());
    exposer_->RegisterCollectable(gauges_);
  }
  std::string address() const override {
    const auto ports = exposer_->GetListeningPorts();
    return host_ + ":" + (ports.empty() ? std::string("?") : std::to_string(ports.front()));
  }

 private:
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<Gauges> gauges_;  // the exposer holds weak pointers
  std::string host_;
};

}  // namespace

ptc::Result<std::unique_ptr<MetricsExporter>> MetricsExporter::start(
    const std::string& addr, std::function<std::vector<GaugeSample>()> gauges) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    return ptc::invalid("--metrics " + addr + ": expected HOST:PORT");
  try {
    // civetweb: one listening thread plus two workers (scrapes are rare and small).
    auto exposer = std::make_unique<prometheus::Exposer>(addr, 2);
    return std::unique_ptr<MetricsExporter>(
        new Exporter(std::move(exposer), std::make_shared<Gauges>(std::move(gauges)), addr.substr(0, colon)));
  } catch (const std::exception& e) {
    return ptc::error(ptc::Code::kUnavailable, "cannot serve metrics on " + addr + ": " + e.what());
  }
}

}  // namespace ptcfs
