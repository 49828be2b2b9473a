#include "daemon/reshard/rank_file.h"

#include "daemon/store/file_util.h"

namespace ptcfs {

Result<formats::SafetensorsHeader> read_safetensors_header(const std::string& path) {
  PTC_ASSIGN_OR_RETURN(auto file, File::open_read(path));
  PTC_ASSIGN_OR_RETURN(uint64_t size, file.size());
  return formats::read_safetensors_header(
      size, [&](uint64_t off, void* buf, size_t len) { return file.read_at(off, buf, len); }, path);
}

}  // namespace ptcfs
