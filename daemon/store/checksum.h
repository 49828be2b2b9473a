// Checksums of stored and transferred bytes (docs/ARCHITECTURE.md "Reliability rules"):
// XXH3-64, in one place for the store, the peer service and the peer reader.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ptcfs {

// The XXH3-64 of bytes (what a receiver checks a reply against).
uint64_t xxh3_of(const void* data, size_t len);

// XXH3-64 over bytes fed in pieces; digest() equals xxh3_of of their concatenation.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, size_t len);
  uint64_t digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

}  // namespace ptcfs
