#include "ptc/base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

namespace ptcfs::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::atomic<int> g_format{static_cast<int>(Format::kText)};
std::mutex g_mu;
const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
const char* kLower[] = {"debug", "info", "warn", "error"};

// msg as a quoted string: JSON's escapes, which logfmt readers accept too.
std::string quoted(std::string_view msg) {
  std::string out = "\"";
  for (const char c : msg) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}
}  // namespace

void set_format(Format f) { g_format.store(static_cast<int>(f)); }

bool parse_format(std::string_view s, Format& out) {
  const std::pair<std::string_view, Format> names[] = {
      {"text", Format::kText}, {"logfmt", Format::kLogfmt}, {"json", Format::kJson}};
  for (auto [n, f] : names)
    if (s == n) {
      out = f;
      return true;
    }
  return false;
}

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
  const auto format = static_cast<Format>(g_format.load(std::memory_order_relaxed));
  const int level = static_cast<int>(l);
  std::string line;
  if (format == Format::kJson)
    line = fmt::format("{{\"ts\":\"{}.{:03}Z\",\"level\":\"{}\",\"msg\":{}}}\n", ts, ms, kLower[level], quoted(msg));
  else if (format == Format::kLogfmt)
    line = fmt::format("ts={}.{:03}Z level={} msg={}\n", ts, ms, kLower[level], quoted(msg));
  else
    line = fmt::format("{}.{:03}Z {:<5} {}\n", ts, ms, kNames[level], msg);
  std::lock_guard lock(g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ptcfs::log
