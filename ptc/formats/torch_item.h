// Reads one tensor item of a .distcp file: a complete torch.save ZIP archive of one tensor
// (docs/DCP-ON-DISK.md §2), located by its .metadata entry (ptc/formats/dcp_reader.h). Nothing is
// run and the tensor's bytes are not read: the result says where they lie in the item.
//
// The archive is read from its end, as torch.load does: the end of central directory (and the
// ZIP64 records torch writes), the central directory (at most 1 MiB), then the local headers of
// `<prefix>/data.pkl` (at most 16 MiB) and of the one storage record `<prefix>/data/<key>`; both
// must be stored (method 0), not compressed or encrypted, and lie before the directory; a
// `<prefix>/byteorder` record, when there is one, must say "little". data.pkl
// must be exactly torch._utils._rebuild_tensor_v2 (a typed storage: torch.FloatStorage, ...) or
// _rebuild_tensor_v3 (torch.storage.UntypedStorage and a torch.<dtype>) of one persistent storage
// ('storage', class, key, location, numel), with a plain size and stride tuple, requires_grad, an
// empty OrderedDict of backward hooks and no tensor metadata. Refused: any other pickle or
// global, two storages, a dtype ptcfs lacks (kInvalidArgument); negative strides, more than 64
// dims, a storage record of another size than its numel says, or shorter than the tensor's
// extent from its storage offset (kCorrupt). Every error names `where`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ptc/base/status.h"
#include "ptc/dtype.h"
#include "ptc/region.h"

namespace ptcfs::formats {

struct TorchTensorItem {
  ptc::DType dtype = ptc::DType::F32;
  ptc::Shape shape, stride;     // stride in elements, all >= 0
  uint64_t storage_offset = 0;  // in elements, of the tensor's first element in the storage
  // The storage record's bytes (the whole storage, which may be larger than the tensor), as a
  // range of the item: the element at index i lies at data_offset + (storage_offset +
  // sum(i[d] * stride[d])) * ptc::dtype_size(dtype).
  uint64_t data_offset = 0, data_length = 0;
};

// Reads bytes [off, off + len) of the item: exactly len bytes, or an error.
using ReadAt = std::function<Result<std::string>(uint64_t off, uint64_t len)>;

inline constexpr uint64_t kMaxTorchDirectory = uint64_t{1} << 20;
inline constexpr uint64_t kMaxTorchDataPkl = uint64_t{16} << 20;

// The tensor of an item of `item_length` bytes, read through `read`.
Result<TorchTensorItem> read_torch_tensor_item(uint64_t item_length, const ReadAt& read, const std::string& where);

// The inverse of torch_dtype_name (ptc/formats/torch_archive.h): "float32" -> F32; false for a
// name that is not one of ptcfs's dtypes.
bool dtype_from_torch_name(std::string_view name, ptc::DType& out);

}  // namespace ptcfs::formats
