#include "daemon/cluster/membership.h"

#include "daemon/cluster/nodes.h"

namespace ptcfs {

std::string step_key(const std::string& job, const std::string& step) { return "/ptcfs/steps/" + job + "/" + step; }
std::string dataset_key(const std::string& job, const std::string& name) {
  return "/ptcfs/datasets/" + job + "/" + name;
}

std::vector<int> StaticMembership::members() const { return all_nodes(*peers_.cluster()); }

}  // namespace ptcfs
