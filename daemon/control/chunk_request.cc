#include "daemon/control/chunk_request.h"

#include <string>

#include "ptc/chunk_layout.h"
#include "ptc/dtype.h"

namespace ptcfs {

using nlohmann::json;

namespace {

Result<std::vector<int64_t>> ints(const json& j, size_t n, const std::string& where) {
  if (!j.is_array() || j.size() != n) return invalid(where + ": expected " + std::to_string(n) + " integers");
  std::vector<int64_t> out;
  for (const auto& v : j) {
    if (!v.is_number_integer()) return invalid(where + ": expected integers");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

}  // namespace

Result<ChunkRequest> parse_chunk_request(const json& chunks, const ptc::Ptc& ptc) {
  if (!chunks.is_object()) return invalid("repartition request: chunks must be an object of tensor names");
  ChunkRequest out;
  out.boxes.resize(ptc.tensors.size());
  for (const auto& [name, list] : chunks.items()) {
    const ptc::TensorSpec* spec = ptc.find(name);
    if (!spec) {
      ++out.unknown;
      continue;
    }
    ++out.tensors;
    const std::string where = "repartition request: chunks of '" + name + "'";
    if (!list.is_array()) return invalid(where + ": expected a list of [lo, hi] boxes");
    const ptc::Box whole = ptc::Box::of_shape(spec->shape);
    auto& boxes = out.boxes[static_cast<size_t>(spec - ptc.tensors.data())];
    for (const auto& b : list) {
      if (!b.is_array() || b.size() != 2) return invalid(where + ": expected a list of [lo, hi] boxes");
      ptc::Box box;
      PTC_ASSIGN_OR_RETURN(box.lo, ints(b[0], spec->shape.size(), where));
      PTC_ASSIGN_OR_RETURN(box.hi, ints(b[1], spec->shape.size(), where));
      for (size_t d = 0; d < box.lo.size(); ++d)
        if (box.lo[d] < 0 || box.lo[d] > box.hi[d])
          return invalid(where + ": box " + box.to_string() + " is not a box");
      if (!whole.contains(box))
        return invalid(where + ": box " + box.to_string() + " is outside the tensor's shape " +
                       ptc::shape_string(spec->shape));
      if (!box.empty()) boxes.push_back(std::move(box));
    }
  }
  return out;
}

ptc::Parallelism parallelism_for(const ChunkRequest& req, const ptc::Ptc& ptc, const ptc::Parallelism& current) {
  const int tp = ptc::tp_for_chunks(ptc, req.boxes);
  // When no split tensor's boxes are slices at that tp either, the chunks ask for nothing: the
  // step keeps its tp (a layout spread over the cluster is not gathered onto one shard).
  for (size_t i = 0; i < ptc.tensors.size() && i < req.boxes.size(); ++i)
    if (ptc.tensors[i].tp_dim && !req.boxes[i].empty() && ptc::slices_are(ptc.tensors[i], tp, req.boxes[i]))
      return {tp, current.pp, current.dp};
  return current;
}

json chunk_match(const ChunkRequest& req, const ptc::Ptc& ptc, int tp) {
  size_t exact = 0;
  uint64_t bytes = 0, bytes_exact = 0;
  for (size_t i = 0; i < ptc.tensors.size() && i < req.boxes.size(); ++i) {
    if (req.boxes[i].empty()) continue;
    const auto& spec = ptc.tensors[i];
    const uint64_t n = static_cast<uint64_t>(ptc::num_elements(spec.shape)) * ptc::dtype_size(spec.dtype);
    bytes += n;
    if (ptc::slices_are(spec, tp, req.boxes[i])) {
      ++exact;
      bytes_exact += n;
    }
  }
  return {{"tensors", req.tensors},
          {"unknown", req.unknown},
          {"exact", exact},
          {"bytes", bytes},
          {"bytes_exact", bytes_exact}};
}

}  // namespace ptcfs
