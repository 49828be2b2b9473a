// Little-endian integers in byte buffers: every wire and file format of ptcfs (safetensors'
// header length, MMIDIDX, the frame and direct-socket headers) stores them so. Byte by byte,
// so they hold on any host and at any alignment; compilers turn the loops into one move.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ptcfs {

template <class T>
T load_le(const void* p) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  const auto* b = static_cast<const unsigned char*>(p);
  U v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v = static_cast<U>(v | static_cast<U>(static_cast<U>(b[i]) << (8 * i)));
  return static_cast<T>(v);
}

template <class T>
void store_le(void* p, T value) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  const U v = static_cast<U>(value);
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace ptcfs
