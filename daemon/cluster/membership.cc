#include "daemon/cluster/membership.h"

#include "daemon/cluster/nodes.h"

namespace ptcfs {

namespace {
const std::string kSteps = "/ptcfs/steps/";
const std::string kDatasets = "/ptcfs/datasets/";

// "<prefix><a>/<b>" -> a, b (b may hold further slashes: callers check the names).
bool parse_key(const std::string& prefix, const std::string& key, std::string& a, std::string& b) {
  if (key.rfind(prefix, 0) != 0) return false;
  const size_t slash = key.find('/', prefix.size());
  if (slash == std::string::npos) return false;
  a = key.substr(prefix.size(), slash - prefix.size());
  b = key.substr(slash + 1);
  return !a.empty() && !b.empty();
}
}  // namespace

std::string etcd_step_key(const std::string& job, const std::string& step) { return kSteps + job + "/" + step; }

bool parse_etcd_step_key(const std::string& key, std::string& job, std::string& step) {
  return parse_key(kSteps, key, job, step);
}
std::string etcd_dataset_key(const std::string& job, const std::string& name) { return kDatasets + job + "/" + name; }

bool parse_etcd_dataset_key(const std::string& key, std::string& job, std::string& name) {
  return parse_key(kDatasets, key, job, name);
}

std::vector<int> StaticMembership::members() const { return all_nodes(*peers_.cluster()); }

}  // namespace ptcfs
