// Who may write a file being saved into the mount (docs/FORMATS.md "Saving into the mount"):
// any number of handles may write a tensor file (ranges of it, ZeRO-style), but a file written
// whole (ptc.json, a shard file) has one writer at a time, its owner: another open is refused
// (EBUSY) while the owner has it, and waits a moment when the owner closed it and only its
// release is still on the way (the kernel sends the close before the release). A write after the
// owner's close voids that close (only a copy of the descriptor was closed: a child's, at its
// exit or exec), and the file is checked again at the next.
//
// Not thread-safe on its own: its file's step lock (PendingStep::mu) guards it, and open()
// waits on the step's condition variable under that lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <string>

#include "ptc/base/mutex.h"
#include "ptc/base/status.h"

namespace ptcfs {

class WriterGate {
 public:
  explicit WriterGate(bool whole) : whole_(whole) {}

  // A new handle's id (1, 2, ...). A whole file held by another owner: waits up to `wait` on
  // `released` (notified by release()) when that owner closed it, then refuses
  // (kFailedPrecondition, `busy` as its message) if it is still held.
  Result<uint64_t> open(MutexLock& lock, std::condition_variable_any& released, std::chrono::milliseconds wait,
                        const std::string& busy);
  // Whether `writer` may write now (a whole file: only its owner); kFailedPrecondition naming
  // `where` if not. `reopened` is set when this write voids a close of the owner's.
  Status write(uint64_t writer, const std::string& where, bool& reopened);
  // Whether `writer` may truncate it: a whole file only its owner, or anyone while nobody has it.
  Status truncate(uint64_t writer, const std::string& where) const;
  // `writer` closed (flushed) its handle: for the owner of a whole file, its release is coming.
  void closed(uint64_t writer);
  // `writer`'s handle is gone: the owner's frees the file (`released` is notified). Whether no
  // handle is left.
  bool release(uint64_t writer, std::condition_variable_any& released);

  int writers() const { return writers_; }   // handles open for writing
  uint64_t owner() const { return owner_; }  // a whole file's one open handle (0: none)
  bool whole() const { return whole_; }

 private:
  const bool whole_;
  int writers_ = 0;
  uint64_t last_ = 0;          // the last id given
  uint64_t owner_ = 0;         // a whole file's one open handle (0: none)
  bool owner_closed_ = false;  // it was closed (flushed) and not written since: its release is coming
};

}  // namespace ptcfs
