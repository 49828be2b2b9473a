// A stock PyTorch DCP save written into the mount becomes a ptcfs step (docs/FORMATS.md "Stock
// dcp.save into the mount"): when its .metadata lands, every tensor becomes one PTC tensor of
// its global shape, split as its chunks split it (ptc/chunk_layout.h: tp_dim where the chunks
// start, pad_to 1, at the tp whose slices are the chunks of the most bytes), each chunk copied
// from its .distcp file to its place in tp{t}-pp0/<fqn>.npy; every bytes item the U8 tensor
// __dcp__/bytes/<fqn> holding the torch.save bytes DCP wrote; and the planner data the U8 tensor
// __dcp__/planner_data (JSON).
//
// plan_dcp_save is pure: it decides the PTC and every copy from the parsed metadata and each
// chunk's torch.save record. write_dcp_save writes the result into the pending step through the
// mount's own write path, ptc.json last, so that the step commits as any save does.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fs/content.h"
#include "ptc/base/status.h"
#include "ptc/formats/dcp_reader.h"
#include "ptc/formats/torch_item.h"
#include "ptc/model.h"

namespace ptcfs {

inline constexpr const char* kDcpBytesPrefix = "__dcp__/bytes/";
inline constexpr const char* kDcpPlannerData = "__dcp__/planner_data";

// `len` bytes at `src` of .distcp file `file` go to byte `dst` of a tensor's data.
struct DcpCopy {
  std::string file;
  uint64_t src = 0, dst = 0, len = 0;
};

// A chunk whose record is not in C order (saved from a view such as w.t()): its elements lie
// at src + (sum(i[d] * stride[d])) * itemsize of .distcp file `file`; it is read whole and put in
// C order before it is written (at most kMaxDcpGather bytes of record).
struct DcpGather {
  std::string file;
  uint64_t src = 0;
  uint64_t span = 0;                  // bytes of the record from src to the chunk's last element
  ptc::Shape offsets, sizes, stride;  // the chunk's box in the tensor, and its record's strides
  ptc::Box region, frame;             // what of it goes to this file, and the box the file holds
};

inline constexpr uint64_t kMaxDcpGather = uint64_t{1} << 30;

// `len` zero bytes at byte `dst` of a slice's data: its padding.
struct DcpZeros {
  uint64_t dst = 0, len = 0;
};

// One tensor file of the step: the slice of tensor `name` that TP rank `shard` holds, written
// as tp{shard}-pp0/<name>.npy.
struct DcpTensorFile {
  std::string name;
  int shard = 0;
  ptc::DType dtype = ptc::DType::U8;
  ptc::Shape shape;             // the slice's (local) shape
  std::vector<DcpCopy> copies;  // with gathers and zeros, covering the data once
  std::vector<DcpGather> gathers;
  std::vector<DcpZeros> zeros;
  std::string bytes;  // the data itself, when it is ptcfs's own (the planner data)
};

struct DcpSave {
  ptc::Ptc ptc;
  std::vector<DcpTensorFile> files;  // by name, then shard
  uint64_t bytes = 0;                // of tensor data, all together (each copy counted)
};

// The torch.save record of a tensor chunk, read from its .distcp file.
using DcpItemReader =
    std::function<Result<formats::TorchTensorItem>(const formats::DcpItem&, const formats::DcpChunk&)>;

Result<DcpSave> plan_dcp_save(const formats::DcpMetadata& md, const DcpItemReader& item, const std::string& where);

// Reads `len` bytes at `off` of a .distcp file.
using DcpFileReader = std::function<Result<std::string>(const std::string& file, uint64_t off, uint64_t len)>;

// Per shard of the planned save (its tp index), the node that holds it when the .distcp files
// lie on several nodes (`file_nodes`: file -> node): the one whose files hold the most of the
// shard's bytes, so that the fewest cross the network; ties go to the first such node by name, and
// a shard no file's bytes go to (all padding or ptcfs's own bytes) to `fallback`.
std::vector<std::string> dcp_shard_holders(const DcpSave& save, const std::map<std::string, std::string>& file_nodes,
                                           const std::string& fallback);

// Writes the planned tensor files into job/step (a pending step) of `target` (those of the
// shards `mine` marks, or all when it is empty); then write_dcp_ptc writes ptc.json, which
// completes the step (or this node's part of it).
Status write_dcp_tensors(fs::WriteTarget& target, const std::string& job, const std::string& step, const DcpSave& save,
                         const DcpFileReader& read, const std::vector<bool>& mine = {});
Status write_dcp_ptc(fs::WriteTarget& target, const std::string& job, const std::string& step, const DcpSave& save);

}  // namespace ptcfs
