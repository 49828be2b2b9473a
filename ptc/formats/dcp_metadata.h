// The .metadata of a PyTorch Distributed Checkpoint folder, written for the DCP view of a step
// (docs/FORMATS.md "The DCP view"): the pickle torch.distributed.checkpoint's FileSystemReader
// loads, with every tensor's chunks and every bytes item's place in the folder's .distcp files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptc/dtype.h"
#include "ptc/region.h"

namespace ptcfs::formats {

struct DcpChunk {
  ptc::Shape offsets, sizes;  // of the chunk in the tensor (a tensor item)
  std::string file;           // relative path of its .distcp file
  uint64_t offset = 0;        // of its torch.save archive (a bytes item: its bytes) in the file
  uint64_t length = 0;
};

struct DcpItem {
  std::string fqn;
  bool bytes = false;  // a bytes item (one chunk, its offsets and sizes unused)
  ptc::DType dtype = ptc::DType::F32;
  ptc::Shape size;  // the whole tensor's
  std::vector<DcpChunk> chunks;
};

// The pickle of a torch.distributed.checkpoint.metadata.Metadata holding `items` (version
// "1.0.0", no planner data).
std::string dcp_metadata(const std::vector<DcpItem>& items);

}  // namespace ptcfs::formats
