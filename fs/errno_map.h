// The one place where ptcfs error codes become errno values: the FUSE boundary.
#pragma once

#include "ptc/base/status.h"

namespace ptcfs::fs {

int to_errno(const Status& s);

}  // namespace ptcfs::fs
