#include "daemon/store/failpoint.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "ptc/base/log.h"

namespace ptcfs {

namespace {

// The entry of PTCFS_FAILPOINT naming `name` ("<name>" or "<name>:<seconds>"), if any.
std::optional<std::string_view> armed_entry(const char* name) {
  static const char* armed = std::getenv("PTCFS_FAILPOINT");
  if (!armed) return std::nullopt;
  const std::string_view want(name);
  for (std::string_view rest(armed); !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (entry.substr(0, entry.find(':')) == want) return entry;
  }
  return std::nullopt;
}

}  // namespace

void failpoint(const char* name) {
  // A comma-separated list of "<name>" (waits forever) or "<name>:<seconds>" (pauses that
  // long, then goes on).
  const auto entry = armed_entry(name);
  if (!entry) return;
  const size_t colon = entry->find(':');
  if (colon != std::string_view::npos) {
    const double seconds = std::atof(std::string(entry->substr(colon + 1)).c_str());
    log::warn("failpoint {} reached; pausing {} s", name, seconds);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    log::warn("failpoint {} passed", name);
    return;
  }
  log::warn("failpoint {} reached; waiting here to be killed", name);
  for (;;) ::pause();
}

bool failpoint_switch(const char* name) { return armed_entry(name).has_value(); }

}  // namespace ptcfs
