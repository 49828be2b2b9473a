// Layouts that follow chunks (docs/FORMATS.md "Layouts from chunks"): which PTC split and which
// tp make the slices of a layout the boxes a set of ranks holds (a DCP save's chunks, or the
// DTensor shards a job at a new mesh will load), so that each rank's bytes are one slice.
//
// Pure: no I/O. A tensor's chunks are the non-empty boxes, in its global coordinates, that
// cover it exactly once (the caller checked that); the boxes of a job that is about to load
// may also repeat (replicas) and need not cover it.
#pragma once

#include <cstdint>
#include <vector>

#include "ptc/model.h"
#include "ptc/region.h"

namespace ptcfs::ptc {

// The most TP ranks a layout is derived for, and the most slices (tensors x tp) it may have:
// beyond them the chunks are not followed (a crafted chunk list cannot make a huge layout).
inline constexpr int kMaxChunkTp = 1024;
inline constexpr uint64_t kMaxChunkSlices = uint64_t{1} << 22;
// The most tps weighed (those the most bytes suggest; 1 always).
inline constexpr size_t kMaxChunkCandidates = 16;

// The dimension `boxes` split a tensor of `shape` along: -1 when one box is the whole tensor
// (or there are none); else the dimension along which the boxes start at the most distinct
// places (the lowest on a tie).
int chunk_split_dim(const Shape& shape, const std::vector<Box>& boxes);

// The split a tensor stored from `boxes` gets: tp_dim the chunk_split_dim (none when -1), and
// pad_to 1 so that any tp is a valid layout (uneven last chunks are DTensor's and
// torch.chunk's: every chunk ceil(N / tp) long, the last ones shorter or empty).
void split_like_chunks(TensorSpec& spec, const std::vector<Box>& boxes);

// Whether the slices of `spec` at `tp` (the real part of each, padding left out) are exactly
// the distinct boxes in `boxes`, none left over. False when `tp` is not a valid split of it.
bool slices_are(const TensorSpec& spec, int tp, const std::vector<Box>& boxes);

// The tp whose slices are the boxes of the most bytes (the smallest such tp on a tie), among
// the tps every tensor of `ptc` accepts at its parallelism's pp and dp and the boxes suggest
// (the kMaxChunkCandidates the most bytes suggest). `boxes` is indexed like
// ptc.tensors (empty: nothing known of that tensor). 1 when no split tensor's boxes match any tp.
int tp_for_chunks(const Ptc& ptc, const std::vector<std::vector<Box>>& boxes);

}  // namespace ptcfs::ptc
