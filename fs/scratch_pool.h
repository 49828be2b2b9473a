// Scratch memory for read replies (records gathered from a dataset's files, a fragmented reply
// made into one buffer), reused from one request to the next. A fresh megabyte per request
// costs a page fault and the zeroing of every new page, and the allocator hands freed blocks
// of that size back to the system, so each request paid again (a profile of a dataset view's
// first read: 10-12% of the daemon's time). Thread-safe.
#pragma once

#include <cstddef>
#include <memory>

namespace ptcfs::fs {

// At least `bytes` bytes, uninitialised; returned to the pool when the last owner lets go.
// Blocks of more than kScratchMax bytes are not kept.
inline constexpr size_t kScratchMax = 8 << 20;
std::shared_ptr<std::byte[]> scratch(size_t bytes);

}  // namespace ptcfs::fs
