// Copies out of read-only mappings of files that ptcfs does not own (a dataset's source
// files, docs/ARCHITECTURE.md "Datasets"). If such a file is truncated while mapped, touching
// a page past its new end raises SIGBUS, which would kill the daemon; here it makes the copy
// return false instead, and the caller reads the bytes again with pread to name the file.
//
// Thread-safe: the SIGBUS handler is installed once, and acts only on a thread inside
// run_guarded; a SIGBUS elsewhere goes to the handler that was there before (by default it
// ends the process, as before). What runs under the guard is left in the middle when the
// guard jumps out, so it must not allocate, lock, throw or leave anything half made that
// matters afterwards: memcpy, memchr, reads into memory the caller owns.
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

// Runs fn(ctx) under the guard (the rules above); false when it touched a page that could
// not be read, and then fn stopped there.
[[nodiscard]] bool run_guarded(void (*fn)(void*), void* ctx);

// run_guarded for a callable.
template <class F>
[[nodiscard]] bool run_guarded(F& f) {
  return run_guarded([](void* c) { (*static_cast<F*>(c))(); }, &f);
}

}  // namespace ptcfs
