// Shared by the libFuzzer targets (tests/fuzz/README.md): each feeds one parser the bytes it
// is given and then uses what the parser accepted, so that a value it lets through that later
// code cannot handle is found too. A target must never crash, hang or leak, whatever the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ptc/model.h"

namespace ptcfs::fuzz {

inline std::string_view view(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// The small parallel configs the targets lay accepted PTCs out for.
inline constexpr ptc::Parallelism kConfigs[] = {{1, 1, 1}, {2, 1, 1}, {2, 2, 1}, {4, 1, 2}, {3, 3, 1}};

}  // namespace ptcfs::fuzz
