// Reads the .metadata of a PyTorch Distributed Checkpoint folder as stock
// torch.distributed.checkpoint's FileSystemWriter writes it (docs/DCP-ON-DISK.md §3, §6), so
// that a stock dcp.save into the mount can be taken in. The reading side of
// ptc/formats/dcp_metadata.h, whose DcpItem it returns.
//
// Nothing is run: the pickle is read by ptc/formats/pickle_reader.h and interpreted against an
// allow list of globals (the classes of torch.distributed.checkpoint.metadata and _StorageInfo,
// torch.Size, torch's dtypes and strided layout, _get_layout('torch.strided'), getattr on
// _MEM_FORMAT_ENCODING only, pathlib paths and OrderedDict). Any other global anywhere in the
// pickle (os.system, builtins.eval, Megatron's all_local_plans classes) is refused with
// kInvalidArgument naming it, as are a dtype ptcfs lacks and transform_descriptors (compressed
// items). A pickle of another shape, or whose items do not add up, is kCorrupt.
//
// What is checked, per tensor: a ptcfs dtype, at most 64 dims, numel * itemsize below 2^63,
// at least one chunk, every chunk of the tensor's rank and inside it, and the chunks covering
// every element exactly once; at most 1M chunks in all. Every chunk and bytes item has exactly
// one storage_data entry (and every entry a chunk), whose relative_path is a plain file name
// (not empty, no '/', not "." or "..", no NUL, at most 255 bytes). FQNs are unique, not
// empty and hold no NUL. Every error names `where` and the FQN at fault.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ptc/base/status.h"
#include "ptc/formats/dcp_metadata.h"

namespace ptcfs::formats {

// One element of a key path: a dict key or a list index.
using DcpPathElement = std::variant<std::string, int64_t>;

struct DcpMetadata {
  std::vector<DcpItem> items;  // sorted by fqn; a bytes item has one chunk and an empty size
  // planner_data, sorted by fqn: each flat key's path in the state dict as dcp.save flattened
  // it (docs/DCP-ON-DISK.md §5); empty when the checkpoint has none (planner_data None).
  std::vector<std::pair<std::string, std::vector<DcpPathElement>>> planner_data;
};

inline constexpr size_t kMaxDcpChunks = size_t{1} << 20;  // in all the items of one .metadata
inline constexpr size_t kMaxDcpDims = 64;

// The items of a .metadata file's bytes; `where` names it in errors.
Result<DcpMetadata> parse_dcp_metadata(std::string_view pickle, const std::string& where);

// Checks that every chunk's [offset, offset + length) lies in its file, given each file's size
// by its relative path: a missing file is kNotFound, a range past the end kOutOfRange.
Status check_dcp_references(const DcpMetadata& md, const std::map<std::string, uint64_t>& file_sizes,
                            const std::string& where);

}  // namespace ptcfs::formats
