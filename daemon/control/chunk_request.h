// A repartition asked for by chunks (docs/FORMATS.md "Layouts from chunks"): the request names,
// per tensor, the boxes the ranks of a job at a new mesh will load ("chunks": {"<name>":
// [[lo, hi], ...]}), and the daemon picks the tp whose slices are those boxes
// (ptc/chunk_layout.h), keeping the step's pp and dp.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/base/status.h"
#include "ptc/model.h"
#include "ptc/region.h"

namespace ptcfs {

struct ChunkRequest {
  std::vector<std::vector<ptc::Box>> boxes;  // indexed like the step's ptc.tensors
  size_t tensors = 0;                        // names the step has
  size_t unknown = 0;                        // names it does not have (left out)
};

// Reads the "chunks" member against the step's PTC: each box of each known name has the
// tensor's rank and lies inside it (kInvalidArgument naming the tensor otherwise).
Result<ChunkRequest> parse_chunk_request(const nlohmann::json& chunks, const ptc::Ptc& ptc);

// The configuration the chunks ask for: tp_for_chunks, with `current`'s pp and dp; `current`
// itself when no split tensor's boxes are slices at that tp (a 2-D grid of every weight, say).
ptc::Parallelism parallelism_for(const ChunkRequest& req, const ptc::Ptc& ptc, const ptc::Parallelism& current);

// What the chosen tp gives the job: {"tensors", "unknown", "exact": tensors whose slices are
// their boxes, "bytes", "bytes_exact"}.
nlohmann::json chunk_match(const ChunkRequest& req, const ptc::Ptc& ptc, int tp);

}  // namespace ptcfs
