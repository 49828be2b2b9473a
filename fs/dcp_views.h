// The DCP view of a step (docs/FORMATS.md "The DCP view"): MNT/<job>/<step>/dcp/ holds a
// PyTorch Distributed Checkpoint of the step's current version that stock
// torch.distributed.checkpoint loads, generated from the layout, no byte copied:
//
//   .metadata            the pickle DCP's FileSystemReader loads: every tensor's chunks and
//                        every bytes item, and where each lies
//   tp{t}-pp{p}.distcp   a torch.save archive per chunk of the shard's slices that a reader
//                        can take as it lies (a piece of a slice that is whole rows of it:
//                        plain splits, fused parts and padding along dimension 0)
//   full.distcp          one archive of the whole tensor for every other tensor (split or
//                        padded along a later dimension), read through its full view
//
// A tensor named __dcp__/bytes/<fqn> (a DCP save's bytes item) is the bytes item <fqn>, stored
// as it came; other __dcp__/ names (the planner data) are not shown.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fs/content.h"
#include "fs/views.h"

namespace ptcfs::fs {

inline constexpr const char* kDcpDir = "dcp";

// Every file of the step's dcp/ folder, by name.
std::vector<std::pair<std::string, std::shared_ptr<const View>>> dcp_views(const std::shared_ptr<const StepContent>& c);

}  // namespace ptcfs::fs
