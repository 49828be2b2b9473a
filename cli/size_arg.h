// Byte sizes given on the command line (`export --max-shard-size`), docs/FORMATS.md "Export".
#pragma once

#include <cstdint>
#include <string>

#include "ptc/base/status.h"

namespace ptcfs::cli {

// A number of bytes: a whole or decimal number, then optionally one space and a unit, case
// ignored: B; kB, MB, GB, TB (powers of 1000, as ptcfs prints sizes and Hugging Face counts
// them); KiB, MiB, GiB, TiB (powers of 1024). "5GB", "5gb", "100kB", "100.0 kB", "2GiB",
// "1048576". kInvalidArgument for anything else, a size of 0, a fraction of a byte and a size
// past 2^63.
Result<uint64_t> parse_size(const std::string& text);

}  // namespace ptcfs::cli
