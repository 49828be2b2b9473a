#include "bench/bench_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ptcfs::bench {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double parallel_memcpy(void* dst, const void* src, size_t n, unsigned threads) {
  const double t0 = now_s();
  std::vector<std::thread> ts;
  const size_t part = (n + threads - 1) / threads;
  for (unsigned i = 0; i < threads; ++i) {
    const size_t lo = std::min(n, i * part), hi = std::min(n, lo + part);
    ts.emplace_back([=] { std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo); });
  }
  for (auto& t : ts) t.join();
  return now_s() - t0;
}

double read_file(const std::string& path, size_t block, uint64_t* bytes) {
  std::vector<char> buf(block);
  const double t0 = now_s();
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), block);
    if (n < 0) throw std::runtime_error("read " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    *bytes += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return now_s() - t0;
}

void drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void write_pattern_file(const std::string& path, const void* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("create " + path);
  if (std::fwrite(data, 1, n, f) != n) throw std::runtime_error("write " + path);
  std::fclose(f);
}

std::string gib_per_s(uint64_t bytes, double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB/s", static_cast<double>(bytes) / (1 << 30) / s);
  return buf;
}

}  // namespace ptcfs::bench
