// The one logging facade of ptcfs: levels, fmt-style formatting, one sink (stderr with a
// timestamp and level). Pure planning code in ptc/ does not log; the daemon, fs and
// transport log what they did and why they refused.
// Thread-safety: every function may be called from any thread; one event is one write of one
// whole line under a lock, so lines of different threads never interleave. Logging never fails
// (a failed write to stderr is dropped).
#pragma once

#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace ptcfs::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// text: "2026-11-24T22:11:49.575Z INFO  message"; logfmt: ts=... level=info msg="message";
// json: {"ts":"...","level":"info","msg":"message"}. One line per event, to stderr.
enum class Format { kText, kLogfmt, kJson };

void set_level(Level l);
void set_format(Format f);
// Parses "text", "logfmt", "json"; false when unknown.
bool parse_format(std::string_view s, Format& out);
bool enabled(Level l);
// Parses "debug", "info", "warn", "error"; false when unknown.
bool parse_level(std::string_view s, Level& out);
void write(Level l, std::string_view msg);

template <class... A>
void debug(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::kDebug)) write(Level::kDebug, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void info(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::kInfo)) write(Level::kInfo, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::kWarn)) write(Level::kWarn, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void error(fmt::format_string<A...> f, A&&... a) {
  if (enabled(Level::kError)) write(Level::kError, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace ptcfs::log
