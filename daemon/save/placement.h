// Where the bytes of a file being saved into the mount are (docs/FORMATS.md "Saving into the
// mount"): ptc.json and a tensor file whose npy header is not known yet are kept in memory; a
// data file's bytes are then in a blob, at `base` (a shard file's own blob, a tensor file's own
// or a region of its shard's pack).
//
// Not thread-safe on its own: its file's step lock (PendingStep::mu) guards it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "daemon/store/blob_store.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct Placement {
  std::string text;                  // the bytes kept in memory (ptc.json: the accepted file)
  std::shared_ptr<BlobWriter> blob;  // null while the bytes are kept in memory
  uint64_t base = 0;                 // where byte 0 of the file is in `blob`

  bool in_memory() const { return blob == nullptr; }
  // Bytes [off, off + len) kept in memory.
  void keep(uint64_t off, const void* data, size_t len);
  // The file's first `n` bytes (fewer if fewer are there), wherever they are.
  Result<std::string> prefix(uint64_t n) const;
  // Moves what is kept in memory into `to` at `at` (at most `len` bytes of it): the file's
  // bytes are there from now on.
  Status move_to(std::shared_ptr<BlobWriter> to, uint64_t at, uint64_t len);
  // Back to memory, empty (a tensor file cut to 0 gets a new place once its header is known).
  void forget();
};

}  // namespace ptcfs
