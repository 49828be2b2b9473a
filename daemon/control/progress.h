// Progress of a long change forwarded to the CLI's connection, throttled.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/reshard/repartition.h"
#include "transport/rpc.h"

namespace ptcfs {

// Forwards progress at most every 200 ms (and always the first and the last report of a
// phase), so a long copy does not flood the connection. Not thread-safe: the runners report from one
// thread at a time (docs/ARCHITECTURE.md "Changes").
class ThrottledProgress {
 public:
  explicit ThrottledProgress(const transport::ProgressSink& sink) : sink_(sink) {}
  void operator()(const std::string& phase, uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (!sink_ || (phase == phase_ && done != total && now - last_ < std::chrono::milliseconds(200))) return;
    phase_ = phase;
    last_ = now;
    sink_(nlohmann::json{{"phase", phase}, {"done", done}, {"total", total}});
  }
  // As the PhaseProgress a runner takes; valid while this object lives.
  PhaseProgress fn() {
    return [this](const std::string& phase, uint64_t done, uint64_t total) { (*this)(phase, done, total); };
  }

 private:
  const transport::ProgressSink& sink_;
  std::string phase_;  // of the last report forwarded
  std::chrono::steady_clock::time_point last_;
};

}  // namespace ptcfs
