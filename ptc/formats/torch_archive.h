// A torch.save archive of one tensor whose data lies elsewhere (docs/FORMATS.md "The DCP
// view"): what `torch.load` (weights_only) reads as a tensor of `dtype` and `shape`, C order.
// The archive is `head`, then the tensor's bytes, then `tail`: a ZIP of stored records
// archive/data.pkl (a _rebuild_tensor_v3 of an UntypedStorage), archive/byteorder
// ("little"), archive/version ("3\n") and archive/data/0 (the bytes, 64-byte aligned from the
// archive's start), its central directory, and ZIP64 end records (as torch writes them). The
// data record's CRC-32 is 0: computing it would read every byte when the view is built, and
// torch does not check it (other ZIP tools report it).
#pragma once

#include <cstdint>
#include <string>

#include "ptc/dtype.h"
#include "ptc/region.h"

namespace ptcfs::formats {

struct TorchArchive {
  std::string head;
  uint64_t data_bytes = 0;
  std::string tail;
  uint64_t size() const { return head.size() + data_bytes + tail.size(); }
};

TorchArchive torch_tensor_archive(ptc::DType dtype, const ptc::Shape& shape);

// torch's name of a dtype ("float32", "bfloat16", "float8_e4m3fn", ...).
const char* torch_dtype_name(ptc::DType d);

// CRC-32 (ISO-HDLC, as ZIP uses) of n bytes.
uint32_t crc32(const void* data, size_t n);

}  // namespace ptcfs::formats
