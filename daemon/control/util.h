// Small helpers of the control service's request handlers.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/base/json_util.h"
#include "transport/rpc.h"

namespace ptcfs {

// Forwards progress at most every 200 ms (and always the last report of a phase), so a
// long copy does not flood the connection.
class ThrottledProgress {
 public:
  explicit ThrottledProgress(const transport::ProgressSink& sink) : sink_(sink) {}
  void operator()(const std::string& phase, uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (!sink_ || (started_ && done != total && now - last_ < std::chrono::milliseconds(200))) return;
    started_ = true;
    last_ = now;
    sink_(nlohmann::json{{"phase", phase}, {"done", done}, {"total", total}});
  }

 private:
  const transport::ProgressSink& sink_;
  bool started_ = false;
  std::chrono::steady_clock::time_point last_;
};

// The optional "nodes" member of a request: node ids to place the job on.
inline ptc::Result<std::vector<std::string>> nodes_of(const nlohmann::json& req) {
  std::vector<std::string> out;
  if (!req.contains("nodes")) return out;
  if (!req["nodes"].is_array()) return ptc::invalid("request field 'nodes' must be a list of node ids");
  for (const auto& n : req["nodes"]) {
    if (!n.is_string()) return ptc::invalid("request field 'nodes' must be a list of node ids");
    out.push_back(n.get<std::string>());
  }
  return out;
}

}  // namespace ptcfs
