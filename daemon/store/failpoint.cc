#include "daemon/store/failpoint.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "ptc/log.h"

namespace ptcfs {

void failpoint(const char* name) {
  static const char* armed = std::getenv("PTCFS_FAILPOINT");
  if (!armed) return;
  // "<name>" waits forever; "<name>:<seconds>" pauses that long, then goes on.
  const char* colon = std::strchr(armed, ':');
  const size_t len = colon ? static_cast<size_t>(colon - armed) : std::strlen(armed);
  if (std::strlen(name) != len || std::strncmp(armed, name, len) != 0) return;
  if (colon) {
    const double seconds = std::atof(colon + 1);
    ptc::log::warn("failpoint {} reached; pausing {} s", name, seconds);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    ptc::log::warn("failpoint {} passed", name);
    return;
  }
  ptc::log::warn("failpoint {} reached; waiting here to be killed", name);
  for (;;) ::pause();
}

}  // namespace ptcfs
