#include "fs/errno_map.h"

#include <catch2/catch.hpp>

#include <cerrno>
#include <map>

using ptcfs::Code;
using ptcfs::fs::to_errno;

namespace {

// The errno each code means at the FUSE boundary, one row per code of PTC_STATUS_CODES.
const std::map<Code, int>& expected_errno() {
  static const std::map<Code, int> m = {
      {Code::kOk, 0},
      {Code::kInvalidArgument, EINVAL},
      {Code::kNotFound, ENOENT},
      {Code::kAlreadyExists, EEXIST},
      {Code::kCorrupt, EIO},
      {Code::kIo, EIO},
      {Code::kPermissionDenied, EACCES},
      {Code::kUnavailable, EHOSTUNREACH},
      {Code::kFailedPrecondition, EBUSY},
      {Code::kOutOfRange, EINVAL},
      {Code::kResourceExhausted, ENOSPC},
      {Code::kDeadlineExceeded, EIO},
      {Code::kInternal, EIO},
  };
  return m;
}

}  // namespace

TEST_CASE("every status code maps to the errno it means"){
// Generated from the table itself: a code added to PTC_STATUS_CODES without a row above fails here.
#define PTC_ERRNO_CASE(e, name)                                     \
  SECTION(name) {                                                   \
    auto it = expected_errno().find(Code::e);                       \
    INFO("code " << name << " has no expected errno in this test"); \
    REQUIRE(it != expected_errno().end());                          \
    CHECK(to_errno(ptcfs::Status(Code::e, "x")) == it->second);     \
  }
    PTC_STATUS_CODES(PTC_ERRNO_CASE)
#undef PTC_ERRNO_CASE
}

TEST_CASE("the expected table has one row per status code and no more") {
  size_t codes = 0;
#define PTC_COUNT(e, name) ++codes;
  PTC_STATUS_CODES(PTC_COUNT)
#undef PTC_COUNT
  CHECK(expected_errno().size() == codes);
}

TEST_CASE("an OK status maps to 0 and the message does not change the errno") {
  CHECK(to_errno(ptcfs::Status::ok()) == 0);
  CHECK(to_errno(ptcfs::not_found("step 'gpt/100' does not exist")) == ENOENT);
  CHECK(to_errno(ptcfs::io_error("reading blob", ENOSPC)) == EIO);
}
