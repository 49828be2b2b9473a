#include "daemon/save/placement.h"

#include <algorithm>

namespace ptcfs {

void Placement::keep(uint64_t off, const void* data, size_t len) {
  if (text.size() < off + len) text.resize(off + len);
  std::copy_n(static_cast<const char*>(data), len, text.begin() + static_cast<std::ptrdiff_t>(off));
}

Result<std::string> Placement::prefix(uint64_t n) const {
  if (in_memory()) return std::string(text, 0, std::min<uint64_t>(n, text.size()));
  std::string out(n, '\0');
  PTC_ASSIGN_OR_RETURN(size_t got, blob->read_at(base, out.data(), out.size()));
  out.resize(got);
  return out;
}

Status Placement::move_to(std::shared_ptr<BlobWriter> to, uint64_t at, uint64_t len) {
  PTC_RETURN_IF_ERROR(to->write_at(at, text.data(), std::min<uint64_t>(text.size(), len)));
  blob = std::move(to);
  base = at;
  text.clear();
  text.shrink_to_fit();
  return Status::ok();
}

void Placement::forget() {
  text.clear();
  blob.reset();
  base = 0;
}

}  // namespace ptcfs
