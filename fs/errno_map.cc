#include "fs/errno_map.h"

#include <cerrno>

namespace ptcfs::fs {

int to_errno(const Status& s) {
  using ptcfs::Code;
  switch (s.code()) {
    case Code::kOk:
      return 0;
    case Code::kInvalidArgument:
      return EINVAL;
    case Code::kNotFound:
      return ENOENT;
    case Code::kAlreadyExists:
      return EEXIST;
    case Code::kCorrupt:
      return EIO;
    case Code::kIo:
      return EIO;
    case Code::kPermissionDenied:
      return EACCES;
    case Code::kUnavailable:
      return EHOSTUNREACH;
    case Code::kFailedPrecondition:
      return EBUSY;
    case Code::kOutOfRange:
      return EINVAL;
    case Code::kResourceExhausted:
      return ENOSPC;
    case Code::kDeadlineExceeded:
      return EIO;  // a peer that stopped answering
    case Code::kInternal:
      return EIO;
  }
  return EIO;
}

}  // namespace ptcfs::fs
