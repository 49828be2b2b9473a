// Sending a read's bytes to the kernel (FUSE low-level replies), with as few copies as the
// buffer allows.
//
// Thread-safety: called from any FUSE worker, once per request. Errors: none returned; the
// reply itself is the request's answer (libfuse logs a failed send).
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <cstddef>

#include "fs/read_buffer.h"

namespace ptcfs::fs {

// Fewer memory pieces than this go to the kernel as one writev (IOV_MAX, with the header).
inline constexpr size_t kMaxReplyIov = 1023;

// Replies to a read with the bytes of `rb`: nothing (an empty buffer); one writev when every
// segment is memory (mapped blobs, zeros) and there are fewer than kMaxReplyIov; else a
// fuse_bufvec of memory and file ranges, which libfuse splices where it can. Gather a
// fragmented buffer first (ReadBuffer::gather_if_fragmented).
void reply_read(fuse_req_t req, const ReadBuffer& rb);

}  // namespace ptcfs::fs
