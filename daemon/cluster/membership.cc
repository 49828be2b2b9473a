#include "daemon/cluster/membership.h"

#include "daemon/cluster/nodes.h"

namespace ptcfs {

namespace {
const std::string kSteps = "/ptcfs/steps/";
}  // namespace

std::string step_key(const std::string& job, const std::string& step) { return kSteps + job + "/" + step; }

bool parse_step_key(const std::string& key, std::string& job, std::string& step) {
  if (key.rfind(kSteps, 0) != 0) return false;
  const size_t slash = key.find('/', kSteps.size());
  if (slash == std::string::npos) return false;
  job = key.substr(kSteps.size(), slash - kSteps.size());
  step = key.substr(slash + 1);
  return !job.empty() && !step.empty();
}
std::string dataset_key(const std::string& job, const std::string& name) {
  return "/ptcfs/datasets/" + job + "/" + name;
}

std::vector<int> StaticMembership::members() const { return all_nodes(*peers_.cluster()); }

}  // namespace ptcfs
