// Helpers shared by the benchmarks: timing, throughput, and a parallel memcpy baseline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ptcfs::bench {

double now_s();

// Copies n bytes from src to dst with `threads` threads, each a contiguous part; returns seconds.
double parallel_memcpy(void* dst, const void* src, size_t n, unsigned threads);

// Reads a file to its end with reads of `block` bytes; returns seconds, adds bytes to *bytes.
double read_file(const std::string& path, size_t block, uint64_t* bytes);

// Drops the kernel's cached pages of a file (posix_fadvise DONTNEED), so that the next read
// is a first read again. On tmpfs it does nothing: there the pages are the file.
void drop_page_cache(const std::string& path);

// Writes `n` bytes of a deterministic pattern to path (for baselines and fixtures).
void write_pattern_file(const std::string& path, const void* data, size_t n);

std::string gib_per_s(uint64_t bytes, double s);

}  // namespace ptcfs::bench
