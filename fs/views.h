// File views: how the bytes of a file in the mount are composed from stored slices.
//
//   tp{t}-pp{p}.safetensors  canonical safetensors header (ptc/formats/safetensors.h) + the shard's
//                            slices, packed in name order
//   tp{t}-pp{p}/<name>.npy   npy header + one stored slice (padding included)
//   full/<name>.npy          npy header + the whole logical tensor, assembled from the
//                            pieces of the shards that cover it (padding excluded)
//
// A view holds a shared_ptr to the StepContent it was built on, so it reads that version
// for as long as it lives. Views are immutable and safe to read from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fs/content.h"
#include "ptc/base/metrics.h"
#include "ptc/formats/safetensors.h"

namespace ptcfs::fs {

class View {
 public:
  virtual ~View() = default;
  virtual uint64_t size() const = 0;
  // Appends bytes [off, off + len) to out; the range lies inside [0, size()).
  virtual Status read(uint64_t off, uint64_t len, ReadBuffer& out) const = 0;
  // What the file is (label of the read metrics).
  virtual metrics::ViewKind kind() const = 0;
  // The version of the step or dataset it reads (0: none, e.g. a step's ptc.json).
  virtual uint64_t version() const { return 0; }
};

std::shared_ptr<const View> bytes_view(std::string bytes);
// Bytes made by `make` (once, on any thread) when the file is first sized or read.
std::shared_ptr<const View> lazy_bytes_view(std::function<std::string()> make);
// A shard as one safetensors file; its header is built on first use (a layout it cannot be built
// for is a 1-byte file whose read fails, EIO, and the log says why).
std::shared_ptr<const View> shard_safetensors_view(std::shared_ptr<const StepContent> c, const ptc::ShardId& shard);
// That file's layout: its header, and each slice's range in its data area (in the layout's
// slice order).
Result<formats::SafetensorsLayout> shard_safetensors_layout(const ptc::Layout& layout, const ptc::ShardId& shard);
std::shared_ptr<const View> slice_npy_view(std::shared_ptr<const StepContent> c, const ptc::ShardId& shard,
                                           size_t slice);
std::shared_ptr<const View> full_npy_view(std::shared_ptr<const StepContent> c, size_t tensor);

}  // namespace ptcfs::fs
