#include "daemon/store/failpoint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "ptc/log.h"

namespace ptcfs {

void failpoint(const char* name) {
  static const char* armed = std::getenv("PTCFS_FAILPOINT");
  if (!armed) return;
  // "<name>" waits forever; "<name>:<seconds>" pauses that long, then goes on; commas
  // separate several.
  const std::string_view all(armed), want(name);
  for (size_t at = 0; at <= all.size();) {
    const size_t comma = std::min(all.find(',', at), all.size());
    const std::string_view one = all.substr(at, comma - at);
    at = comma + 1;
    const size_t colon = one.find(':');
    if (one.substr(0, colon) != want) continue;
    if (colon != std::string_view::npos) {
      const double seconds = std::atof(std::string(one.substr(colon + 1)).c_str());
      ptc::log::warn("failpoint {} reached; pausing {} s", name, seconds);
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      ptc::log::warn("failpoint {} passed", name);
      return;
    }
    ptc::log::warn("failpoint {} reached; waiting here to be killed", name);
    for (;;) ::pause();
  }
}

}  // namespace ptcfs
