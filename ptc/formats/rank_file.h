// The rules a rank file (tp{t}-pp{p}.safetensors) of a layout obeys, shared by import and
// by saving into the mount (docs/FORMATS.md "ptc.json"): exactly the tensors the
// layout places in the shard, each with its dtype and local (padded) shape.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ptc/formats/safetensors.h"
#include "ptc/layout.h"

namespace ptcfs::formats {

// Checks a parsed header of shard `shard`'s rank file against the layout; returns, per slice
// of the shard (layout order), the index of its header entry. Errors name `path` and the
// tensor at fault.
Result<std::vector<size_t>> match_rank_header(const ptc::Layout& layout, const ptc::ShardId& shard,
                                              const SafetensorsHeader& header, const std::string& path);

// Per shard (layout order), per slice: the byte ranges (offset in the slice, length) that
// are padding (pad_to), sorted. Stored slices hold zeros there whatever a writer put.
using PaddingRanges = std::vector<std::vector<std::vector<std::pair<uint64_t, uint64_t>>>>;
Result<PaddingRanges> layout_padding(const ptc::Layout& layout);

}  // namespace ptcfs::formats
