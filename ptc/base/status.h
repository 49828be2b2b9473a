// The one error type of ptcfs. Every fallible function returns Status or Result<T>;
// no exception crosses a module boundary. Codes come from one table (Code); the FUSE
// boundary maps them to errno in exactly one place (fs/errno_map.cc).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ptcfs {

// The one table of error codes: enumerator, stable lower-case name (logs, JSON errors:
// "not_found"), meaning. The enum and both name functions are generated from it.
#define PTC_STATUS_CODES(X)                                                                         \
  X(kOk, "ok")                                  /* success */                                       \
  X(kInvalidArgument, "invalid_argument")       /* malformed input: bad ptc.json, shape, flag */    \
  X(kNotFound, "not_found")                     /* an unknown job, step, tensor, file */            \
  X(kAlreadyExists, "already_exists")           /* import over an existing step */                  \
  X(kCorrupt, "corrupt")                        /* bytes fail validation: truncated, checksum */    \
  X(kIo, "io")                                  /* the OS refused: open, read, write, fsync */      \
  X(kPermissionDenied, "permission_denied")     /* authentication failed, path escapes its root */  \
  X(kUnavailable, "unavailable")                /* a peer or the daemon cannot be reached */        \
  X(kFailedPrecondition, "failed_precondition") /* well formed, but the state does not allow it */  \
  X(kOutOfRange, "out_of_range")                /* a region or offset outside its tensor or file */ \
  X(kResourceExhausted, "resource_exhausted")   /* a limit was hit: frame size, concurrency */      \
  X(kDeadlineExceeded, "deadline_exceeded")     /* a peer did not answer in time */                 \
  X(kInternal, "internal")                      /* a bug: an invariant did not hold */

enum class Code {
#define PTC_STATUS_ENUM(e, name) e,
  PTC_STATUS_CODES(PTC_STATUS_ENUM)
#undef PTC_STATUS_ENUM
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
inline Status unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
// An OS error: message plus strerror(err).
Status io_error(const std::string& what, int err);

// A value or an error. Access to value() on an error is a bug (asserted).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  // An OK status carries no value: that is a bug, turned into kInternal in every build
  // (asserted in debug builds) so that a caller never reads a value that is not there.
  Result(Status status) : v_(std::move(status)) {
    assert(!std::get<Status>(v_).is_ok());
    if (std::get<Status>(v_).is_ok()) v_ = Status(Code::kInternal, "a Result was made from an OK status");
  }

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    assert(is_ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(is_ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(is_ok());
    return std::get<T>(std::move(v_));
  }
  // The value, or `fallback` on an error.
  T value_or(T fallback) const& { return is_ok() ? std::get<T>(v_) : std::move(fallback); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ptcfs

#define PTC_CONCAT_INNER(a, b) a##b
#define PTC_CONCAT(a, b) PTC_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is an error;
// an optional second argument (a std::string) is prefixed as context:
//   PTC_RETURN_IF_ERROR(sync_dir(d));
//   PTC_RETURN_IF_ERROR(sync_dir(d), "committing " + name);
#define PTC_RETURN_IF_ERROR(...) PTC_RIE_PICK(__VA_ARGS__, PTC_RIE_CTX, PTC_RIE_PLAIN, )(__VA_ARGS__)
#define PTC_RIE_PICK(a, b, name, ...) name
#define PTC_RIE_PLAIN(expr) PTC_RIE_CTX(expr, std::string())
#define PTC_RIE_CTX(expr, context)                                                          \
  do {                                                                                      \
    ::ptcfs::Status _ptc_st = (expr);                                                       \
    if (!_ptc_st.is_ok()) return ::ptcfs::detail::add_context(std::move(_ptc_st), context); \
  } while (0)

// `PTC_ASSIGN_OR_RETURN(auto x, f());` declares x from a Result or returns its error;
// `PTC_ASSIGN_OR_RETURN(auto x, f(), "reading " + path);` prefixes context to the error.
#define PTC_ASSIGN_OR_RETURN(...) PTC_AOR_PICK(__VA_ARGS__, PTC_AOR_CTX, PTC_AOR_PLAIN, )(__VA_ARGS__)
#define PTC_AOR_PICK(a, b, c, name, ...) name
#define PTC_AOR_PLAIN(lhs, expr) PTC_AOR_CTX(lhs, expr, std::string())
#define PTC_AOR_CTX(lhs, expr, context) PTC_AOR_IMPL(PTC_CONCAT(_ptc_res_, __LINE__), lhs, expr, context)
#define PTC_AOR_IMPL(tmp, lhs, expr, context)                                   \
  auto tmp = (expr);                                                            \
  if (!tmp.is_ok()) return ::ptcfs::detail::add_context(tmp.status(), context); \
  lhs = std::move(tmp).value()

namespace ptcfs::detail {
inline Status add_context(Status s, const std::string& context) {
  return context.empty() ? s : s.with_context(context);
}
}  // namespace ptcfs::detail
