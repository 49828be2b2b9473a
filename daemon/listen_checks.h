// The flags whose fault only using them shows: an address nothing can listen on (--listen,
// --metrics) or a direct socket whose folder cannot be made (--direct-socket). ptcfsd tries
// them right after resolving its configuration, before it joins etcd or mounts
// (docs/OPERATIONS.md, Starting), so that a bad one stops the start with its reason and
// leaves no mount or etcd registration behind. The real listeners open later: a port taken
// in between still fails then.
#pragma once

#include <string>

#include "ptc/base/status.h"

namespace ptcfs {

struct ListenFlags {
  std::string listen;         // the control address (in a cluster, the node's addr)
  std::string metrics;        // empty: no metrics
  std::string direct_socket;  // empty: DATA/direct.sock (DATA is made with the store); "none": no socket
};

// kInvalidArgument naming the flag, its value and what is wrong with it.
Status check_listen_flags(const ListenFlags& f);

}  // namespace ptcfs
