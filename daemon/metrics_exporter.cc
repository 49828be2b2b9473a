#include "daemon/metrics_exporter.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <cstring>
#include <exception>

#include "ptc/base/metrics.h"

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

// GET /healthz: "ok" from civetweb's request hook, before prometheus-cpp's handlers, so a
// liveness probe touches neither the store (the gauges count blobs) nor etcd. It needs no
// state: the exporter starts once the daemon serves, and stops when it stops.
int answer_health(mg_connection* conn) {
  const mg_request_info* r = mg_get_request_info(conn);
  if (r == nullptr || r->local_uri == nullptr || std::strcmp(r->local_uri, "/healthz") != 0) return 0;
  mg_printf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n");
  return 200;  // handled; the status for civetweb's access log
}

class Exporter final : public MetricsExporter {
 public:
  Exporter(std::unique_ptr<prometheus::Exposer> exposer, std::shared_ptr<Gauges> gauges, std::string host)
      : exposer_(std::move(exposer)), gauges_(std::move(gauges)), host_(std::move(host)) {
    exposer_->RegisterCollectable(metrics::registry());
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

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::start(const std::string& addr,
                                                                std::function<std::vector<GaugeSample>()> gauges) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    return invalid("--metrics " + addr + ": expected HOST:PORT");
  try {
    // civetweb: one listening thread plus two workers (scrapes are rare and small).
    CivetCallbacks callbacks;  // copied by the server
    callbacks.begin_request = answer_health;
    auto exposer = std::make_unique<prometheus::Exposer>(addr, 2, &callbacks);
    return std::unique_ptr<MetricsExporter>(
        new Exporter(std::move(exposer), std::make_shared<Gauges>(std::move(gauges)), addr.substr(0, colon)));
  } catch (const std::exception& e) {
    return error(Code::kUnavailable, "cannot serve metrics on " + addr + ": " + e.what());
  }
}

}  // namespace ptcfs
