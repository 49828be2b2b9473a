#include "ptc/planner/model_spec.h"

#include <cmath>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "ptc/base/json_util.h"

namespace ptcfs::planner {

using nlohmann::json;

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBF16:
      return "BF16";
    case Precision::kF16:
      return "F16";
    case Precision::kF32:
      return "F32";
  }
  return "?";
}

const char* mlp_name(Mlp m) { return m == Mlp::kSwiglu ? "swiglu" : "gelu"; }

namespace {

// Bounds keep every parameter count within int64 (a layer's weights are below 2^45, times
// at most 2^16 layers) and every byte count far inside a double's exact integers for any
// model that fits on a GPU.
constexpr int64_t kMaxLayers = int64_t{1} << 16;
constexpr int64_t kMaxHidden = int64_t{1} << 20;
constexpr int64_t kMaxFfn = int64_t{1} << 22;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxSeq = int64_t{1} << 24;
constexpr int64_t kMaxBatch = int64_t{1} << 30;
constexpr int64_t kMaxSms = 1 << 16;

// A finite number > 0 (JSON integers count).
Result<double> get_positive(const json& v, const std::string& where) {
  if (!v.is_number()) return invalid(where + ": expected a number, got " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x <= 0) return invalid(where + ": must be greater than 0, got " + v.dump());
  return x;
}

Result<int64_t> required_int(const json& j, const char* key, const std::string& where, int64_t hi) {
  if (!j.contains(key)) return invalid(where + " lacks '" + key + "'");
  return get_int(j[key], where + ": " + key, 1, hi);
}

Result<GpuSpec> parse_gpu(const json& g, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_members(
      g, {"memory_gb", "tflops", "per_node", "intra_node_gbps", "inter_node_gbps", "sms", "memory_bandwidth_gbs"},
      where));
  GpuSpec gpu;
  for (const char* key : {"memory_gb", "tflops", "per_node", "intra_node_gbps", "inter_node_gbps"})
    if (!g.contains(key)) return invalid(where + " lacks '" + key + "'");
  PTC_ASSIGN_OR_RETURN(gpu.memory_gb, get_positive(g["memory_gb"], where + ": memory_gb"));
  PTC_ASSIGN_OR_RETURN(gpu.tflops, get_positive(g["tflops"], where + ": tflops"));
  PTC_ASSIGN_OR_RETURN(int64_t per_node, get_int(g["per_node"], where + ": per_node", 1, kMaxPerNode));
  gpu.per_node = static_cast<int>(per_node);
  PTC_ASSIGN_OR_RETURN(gpu.intra_node_gbps, get_positive(g["intra_node_gbps"], where + ": intra_node_gbps"));
  PTC_ASSIGN_OR_RETURN(gpu.inter_node_gbps, get_positive(g["inter_node_gbps"], where + ": inter_node_gbps"));
  if (g.contains("sms")) {
    PTC_ASSIGN_OR_RETURN(int64_t sms, get_int(g["sms"], where + ": sms", 1, kMaxSms));
    gpu.sms = static_cast<int>(sms);
  }
  if (g.contains("memory_bandwidth_gbs")) {
    PTC_ASSIGN_OR_RETURN(gpu.memory_bandwidth_gbs,
                         get_positive(g["memory_bandwidth_gbs"], where + ": memory_bandwidth_gbs"));
  }
  return gpu;
}

// Member `key` of `j`, when present, as one of `names` (a string), into `out`:
// "MODEL.json: mlp 'relu' is not one of gelu, swiglu".
template <typename E>
Status parse_choice(const json& j, const char* key, std::initializer_list<std::pair<std::string_view, E>> names,
                    const std::string& where, E& out) {
  if (!j.contains(key)) return Status::ok();
  PTC_ASSIGN_OR_RETURN(std::string value, get_string(j[key], where + ": " + key));
  std::string allowed;
  for (const auto& [name, choice] : names) {
    if (value == name) {
      out = choice;
      return Status::ok();
    }
    allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  }
  return invalid(where + ": " + key + " '" + value + "' is not one of " + allowed);
}

// Every member MODEL.json may have (docs/PLANNER.md "MODEL.json").
// clang-format off
const std::initializer_list<std::string_view> kModelMembers = {
    "layers", "hidden", "heads", "ffn", "vocab", "seq", "global_batch", "query_groups", "dtype",
    "distributed_optimizer", "recompute", "sequence_parallel", "mlp", "tied_embeddings", "flash_attention", "dropout",
    "interleave", "pipeline_split", "context_parallel", "overlap_grad_reduce", "overlap_p2p_comm", "overlap_param_gather",
    "grad_reduce_in_bf16", "gpu"};
// clang-format on

}  // namespace

Result<ModelSpec> parse_model_spec(const json& j, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_members(j, kModelMembers, where));
  ModelSpec m;
  PTC_ASSIGN_OR_RETURN(m.layers, required_int(j, "layers", where, kMaxLayers));
  PTC_ASSIGN_OR_RETURN(m.hidden, required_int(j, "hidden", where, kMaxHidden));
  PTC_ASSIGN_OR_RETURN(m.heads, required_int(j, "heads", where, kMaxHidden));
  PTC_ASSIGN_OR_RETURN(m.ffn, required_int(j, "ffn", where, kMaxFfn));
  PTC_ASSIGN_OR_RETURN(m.vocab, required_int(j, "vocab", where, kMaxVocab));
  PTC_ASSIGN_OR_RETURN(m.seq, required_int(j, "seq", where, kMaxSeq));
  PTC_ASSIGN_OR_RETURN(m.global_batch, required_int(j, "global_batch", where, kMaxBatch));
  m.query_groups = m.heads;
  if (j.contains("query_groups")) {
    PTC_ASSIGN_OR_RETURN(m.query_groups, get_int(j["query_groups"], where + ": query_groups", 1, kMaxHidden));
  }
  if (m.hidden % m.heads != 0)
    return invalid(where + ": hidden (" + std::to_string(m.hidden) + ") is not a multiple of heads (" +
                   std::to_string(m.heads) + ")");
  if (m.heads % m.query_groups != 0)
    return invalid(where + ": heads (" + std::to_string(m.heads) + ") is not a multiple of query_groups (" +
                   std::to_string(m.query_groups) + ")");
  PTC_RETURN_IF_ERROR(parse_choice(
      j, "dtype", {{"BF16", Precision::kBF16}, {"F16", Precision::kF16}, {"F32", Precision::kF32}}, where, m.dtype));
  PTC_ASSIGN_OR_RETURN(m.distributed_optimizer, member_bool_or(j, "distributed_optimizer", false, where));
  PTC_ASSIGN_OR_RETURN(m.sequence_parallel, member_bool_or(j, "sequence_parallel", true, where));
  PTC_RETURN_IF_ERROR(parse_choice(
      j, "recompute", {{"none", Recompute::kNone}, {"selective", Recompute::kSelective}, {"full", Recompute::kFull}},
      where, m.recompute));
  PTC_RETURN_IF_ERROR(parse_choice(j, "mlp", {{"gelu", Mlp::kGelu}, {"swiglu", Mlp::kSwiglu}}, where, m.mlp));
  PTC_ASSIGN_OR_RETURN(m.tied_embeddings, member_bool_or(j, "tied_embeddings", true, where));
  PTC_ASSIGN_OR_RETURN(m.flash_attention, member_bool_or(j, "flash_attention", true, where));
  PTC_ASSIGN_OR_RETURN(m.dropout, member_bool_or(j, "dropout", true, where));
  PTC_ASSIGN_OR_RETURN(m.interleave, member_bool_or(j, "interleave", true, where));
  PTC_RETURN_IF_ERROR(parse_choice(
      j, "pipeline_split", {{"even", PipelineSplit::kEven}, {"embedding_and_loss", PipelineSplit::kEmbeddingAndLoss}},
      where, m.pipeline_split));
  PTC_ASSIGN_OR_RETURN(m.context_parallel, member_bool_or(j, "context_parallel", false, where));
  PTC_ASSIGN_OR_RETURN(m.overlap_grad_reduce, member_bool_or(j, "overlap_grad_reduce", true, where));
  PTC_ASSIGN_OR_RETURN(m.overlap_p2p_comm, member_bool_or(j, "overlap_p2p_comm", true, where));
  PTC_ASSIGN_OR_RETURN(m.overlap_param_gather, member_bool_or(j, "overlap_param_gather", true, where));
  PTC_ASSIGN_OR_RETURN(m.grad_reduce_in_bf16, member_bool_or(j, "grad_reduce_in_bf16", false, where));
  if (m.grad_reduce_in_bf16 && m.dtype != Precision::kBF16)
    return invalid(where + ": grad_reduce_in_bf16 needs dtype BF16, got " + precision_name(m.dtype));
  if (!j.contains("gpu")) return invalid(where + " lacks 'gpu'");
  PTC_ASSIGN_OR_RETURN(m.gpu, parse_gpu(j["gpu"], where + ": gpu"));
  return m;
}

Result<ModelSpec> parse_model_json(std::string_view text, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(json j, parse_json(text, where));
  return parse_model_spec(j, where);
}

}  // namespace ptcfs::planner
