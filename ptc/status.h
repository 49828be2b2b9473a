// The one error type of ptcfs. Every fallible function returns Status or Result<T>;
// no exception crosses a module boundary. Codes come from one table (Code); the FUSE
// boundary maps them to errno in exactly one place (fs/errno_map.cc).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ptc {

enum class Code {
  kOk = 0,
  kInvalidArgument,    // the caller's input is malformed (bad ptc.json, bad shape, bad flag)
  kNotFound,           // an unknown job, step, tensor, file
  kAlreadyExists,      // import over an existing step
  kCorrupt,            // stored or received bytes fail validation (truncated, lying header, checksum)
  kIo,                 // the OS refused (open, read, write, fsync)
  kPermissionDenied,   // authentication failed, path escapes its root
  kUnavailable,        // a peer or the daemon cannot be reached
  kFailedPrecondition, // the request is well formed but the state does not allow it
  kOutOfRange,         // a region or offset outside its tensor or file
  kResourceExhausted,  // a limit was hit (frame size, concurrency)
  kInternal,           // a bug: an invariant did not hold
};

// Stable lower-case name of a code, used in logs and in JSON errors ("not_found").
const char* code_name(Code c);
// Inverse of code_name; kInternal for an unknown name.
Code code_from_name(const std::string& name);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "not_found: step 'gpt/100' does not exist"
  std::string to_string() const;
  // Prefixes context to the message: "importing ckpt/tp0-pp0.safetensors: <message>".
  Status with_context(const std::string& context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status error(Code code, std::string message) { return Status(code, std::move(message)); }
inline Status invalid(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status not_found(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status corrupt(std::string m) { return Status(Code::kCorrupt, std::move(m)); }
inline Status internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
// An OS error: message plus strerror(err).
Status io_error(const std::string& what, int err);

// A value or an error. Access to value() on an error is a bug (asserted).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).is_ok()); }

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { assert(is_ok()); return std::get<T>(v_); }
  const T& value() const& { assert(is_ok()); return std::get<T>(v_); }
  T&& value() && { assert(is_ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ptc

#define PTC_CONCAT_INNER(a, b) a##b
#define PTC_CONCAT(a, b) PTC_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is an error.
#define PTC_RETURN_IF_ERROR(expr)                 \
  do {                                            \
    ::ptc::Status _ptc_st = (expr);               \
    if (!_ptc_st.is_ok()) return _ptc_st;         \
  } while (0)

// `PTC_ASSIGN_OR_RETURN(auto x, f());` declares x from a Result or returns its error.
#define PTC_ASSIGN_OR_RETURN(lhs, expr) \
  PTC_ASSIGN_OR_RETURN_IMPL(PTC_CONCAT(_ptc_res_, __LINE__), lhs, expr)
#define PTC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.is_ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
