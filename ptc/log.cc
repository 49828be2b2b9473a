#include "ptc/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ptc::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::mutex g_mu;
const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
}  // namespace

void set_level(Level l) { g_level.store(static_cast<int>(l)); }
bool enabled(Level l) { return static_cast<int>(l) >= g_level.load(std::memory_order_relaxed); }

bool parse_level(std::string_view s, Level& out) {
  const std::pair<std::string_view, Level> names[] = {
      {"debug", Level::kDebug}, {"info", Level::kInfo}, {"warn", Level::kWarn}, {"error", Level::kError}};
  for (auto [n, l] : names)
    if (s == n) {
      out = l;
      return true;
    }
  return false;
}

void write(Level l, std::string_view msg) {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t secs = system_clock::to_time_t(now);
  const auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard lock(g_mu);
  std::fprintf(stderr, "%s.%03dZ %-5s %.*s\n", ts, static_cast<int>(ms), kNames[static_cast<int>(l)],
               static_cast<int>(msg.size()), msg.data());
}

}  // namespace ptc::log
