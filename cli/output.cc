#include "cli/output.h"

#include <unistd.h>

#include <cstdio>

namespace ptcfs::cli {

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

ProgressLine::ProgressLine(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO) == 1) {}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::update(uint64_t done, uint64_t total) {
  if (!tty_) return;
  const int pct = total ? static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)) : 100;
  std::fprintf(stderr, "\r\033[K%s %3d%%  %s / %s", label_.c_str(), pct, human_bytes(done).c_str(),
               human_bytes(total).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::finish() {
  if (tty_ && drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace ptcfs::cli
