// Human-readable output helpers for the CLI.
#pragma once

#include <cstdint>
#include <string>

namespace ptcfs::cli {

// "104.9 MB", "512 B" (decimal units, as `ls -lh --si`).
std::string human_bytes(uint64_t n);

// A one-line progress display on stderr, redrawn in place; silent when stderr is not a
// terminal.
class ProgressLine {
 public:
  explicit ProgressLine(std::string label);
  ~ProgressLine();
  void update(uint64_t done, uint64_t total);
  void finish();

 private:
  std::string label_;
  bool tty_;
  bool drawn_ = false;
};

}  // namespace ptcfs::cli
