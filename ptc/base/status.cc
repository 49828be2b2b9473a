#include "ptc/base/status.h"

#include <cstring>

namespace ptcfs {
namespace {
struct CodeName {
  Code code;
  const char* name;
};
constexpr CodeName kNames[] = {
#define PTC_STATUS_NAME(e, name) {Code::e, name},
    PTC_STATUS_CODES(PTC_STATUS_NAME)
#undef PTC_STATUS_NAME
};
}  // namespace

const char* code_name(Code c) {
  for (const auto& n : kNames)
    if (n.code == c) return n.name;
  return "internal";
}

Code code_from_name(const std::string& name) {
  for (const auto& n : kNames)
    if (name == n.name) return n.code;
  return Code::kInternal;
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status io_error(const std::string& what, int err) { return Status(Code::kIo, what + ": " + std::strerror(err)); }

}  // namespace ptcfs
