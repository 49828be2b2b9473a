// The rules a rank file obeys (ptc/formats/rank_file.h, pure) and reading a safetensors file's
// header from disk, the I/O half import and saving into the mount need besides.
#pragma once

#include <string>

#include "ptc/formats/rank_file.h"
#include "ptc/formats/safetensors.h"

namespace ptcfs {

// Reads and parses the header of a safetensors file (errors name `path`).
Result<formats::SafetensorsHeader> read_safetensors_header(const std::string& path);

}  // namespace ptcfs
