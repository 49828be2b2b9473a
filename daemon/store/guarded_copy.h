// Copies out of read-only mappings of files that ptcfs does not own (a dataset's source
// files, docs/ARCHITECTURE.md "Datasets"). If such a file is truncated while mapped, touching
// a page past its new end raises SIGBUS, which would kill the daemon; here it makes the copy
// return false instead, and the caller reads the bytes again with pread to name the file.
//
// Thread-safe: the SIGBUS handler is installed once, and acts only on a thread inside
// copy_guarded; a SIGBUS elsewhere goes to the handler that was there before (by default it
// ends the process, as before). Only memcpy runs under the guard, so nothing is skipped
// when it jumps out.
#pragma once

#include <cstddef>

namespace ptcfs {

struct CopyRun {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t len = 0;
};

// Copies every run; false when a source page could not be read (SIGBUS): then some runs
// may be copied and others not.
[[nodiscard]] bool copy_guarded(const CopyRun* runs, size_t n);

}  // namespace ptcfs
