// The node's state as gauges for /metrics, read at each scrape: what is stored, what is
// pending or prepared, and how this node stands in its cluster.
// Thread-safety: the sample function is called on the exporter's threads, concurrently with
// everything else; it only calls the sources' thread-safe getters. It cannot fail: a source
// that is absent (no cluster, no direct server) gives no gauge.
#pragma once

#include <string>
#include <vector>

#include "daemon/metrics_exporter.h"

namespace ptcfs {

class Store;
class SaveService;
class Participant;
class Membership;
class DirectServer;

struct NodeGaugeSources {
  const Store* store = nullptr;
  const SaveService* saves = nullptr;
  const Participant* parts = nullptr;      // null outside a cluster
  const Membership* membership = nullptr;  // null outside a cluster
  const DirectServer* direct = nullptr;    // null without a direct socket
  std::string node;                        // the node id ("" alone)
};

std::vector<GaugeSample> node_gauges(const NodeGaugeSources& src);

}  // namespace ptcfs
