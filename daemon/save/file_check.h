// What the checks of a file being saved into the mount found (docs/FORMATS.md "Saving into the
// mount"): its header, once written (and, for a shard file, the file closed), the size it
// declares, how its entries match the layout, and the error that keeps the step from committing
// until the file is removed or written again.
//
// Not thread-safe on its own: its file's step lock (PendingStep::mu) guards it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ptc/base/status.h"
#include "ptc/formats/npy.h"
#include "ptc/formats/safetensors.h"

namespace ptcfs {

struct FileCheck {
  std::optional<uint64_t> expected;    // the file's size as its header says, once known
  formats::SafetensorsHeader header;   // a shard file's
  formats::NpyHeader npy;              // a tensor file's
  std::vector<size_t> entry_of_slice;  // a shard file's, once checked against the layout
  std::string error;                   // why the file contradicts ptc.json or itself ("" if it does not)
  bool error_at_close = false;         // `error` was found by the owner's close

  bool ok() const { return error.empty(); }
  // Records `why` as the file's error; kInvalidArgument with it.
  Status fail(std::string why) {
    error = std::move(why);
    return invalid(error);
  }
  // A write after the owner's close (only a copy of the descriptor was closed): what that close
  // found is void, and a shard file is checked again at the next.
  void reopened(bool shard) {
    if (error_at_close) error.clear();
    error_at_close = false;
    if (shard) {
      expected.reset();
      entry_of_slice.clear();
    }
  }
  // Written again from byte 0 (open with O_TRUNC): nothing is known.
  void forget() {
    expected.reset();
    error.clear();
  }
};

}  // namespace ptcfs
