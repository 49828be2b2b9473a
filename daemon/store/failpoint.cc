#include "daemon/store/failpoint.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "ptc/log.h"

namespace ptcfs {

void failpoint(const char* name) {
  static const char* armed = std::getenv("PTCFS_FAILPOINT");
  if (!armed || std::strcmp(armed, name) != 0) return;
  ptc::log::warn("failpoint {} reached; waiting here to be killed", name);
  for (;;) ::pause();
}

}  // namespace ptcfs
