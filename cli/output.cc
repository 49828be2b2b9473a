#include "cli/output.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/core.h>

namespace ptcfs::cli {

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", n);
  return fmt::format("{:.1f} {}", v, units[u]);
}

ProgressLine::ProgressLine(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO) == 1) {}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::update(uint64_t done, uint64_t total) {
  if (!tty_) return;
  const int pct = total ? static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)) : 100;
  fmt::print(stderr, "\r\033[K{} {:>3}%  {} / {}", label_, pct, human_bytes(done), human_bytes(total));
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::finish() {
  if (tty_ && drawn_) fmt::print(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace ptcfs::cli
