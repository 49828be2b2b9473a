// The PTC model: the tensors of a job and how each is partitioned (ptc.json, docs/FORMATS.md
// "ptc.json"). Parsing validates everything that does not depend on the parallel
// degrees; make_layout (layout.h) validates the rest for one configuration.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ptc/base/status.h"
#include "ptc/dtype.h"
#include "ptc/region.h"

namespace ptcfs::ptc {

struct Parallelism {
  int tp = 1, pp = 1, dp = 1;
  int world() const { return tp * pp * dp; }
  bool operator==(const Parallelism&) const = default;
  std::string to_string() const;  // "tp=2,pp=2,dp=1"
};

// Parses "tp=4,pp=2,dp=1" (any order; each key once; all three required).
Result<Parallelism> parse_parallelism(std::string_view text);

// Which pipeline stages hold a tensor.
struct Placement {
  enum class Kind { kFirst, kLast, kAll, kList, kLayer };
  Kind kind = Kind::kFirst;
  int layer = -1;           // kLayer
  std::vector<int> stages;  // kList, sorted, unique
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::optional<int> tp_dim;  // none: replicated over TP
  int parts = 1;              // fused parts along tp_dim, each split over TP on its own
  int64_t pad_to = 0;         // 0: no padding; m: tp_dim padded to a multiple of m * tp
  // 0: no constraint; n: every part along tp_dim is n attention heads (or key/value groups) of
  // equal size, and a tp that does not divide n is refused, as Megatron refuses it: a rank
  // would hold part of a head (docs/FORMATS.md "ptc.json").
  int64_t heads = 0;
  Placement placement;
};

struct Ptc {
  Parallelism parallelism;
  int num_layers = 0;
  std::vector<TensorSpec> tensors;  // sorted by name, unique
  // The Hugging Face config.json of the model whose tensors these are, under their Hugging Face
  // names: compact JSON of an object, keys sorted (empty: none). A step with one has the hf/ view
  // (docs/FORMATS.md "The Hugging Face view").
  std::string hf_config;

  const TensorSpec* find(std::string_view name) const;
};

// The largest hf_config (its compact JSON): it rides in every step record (etcd's requests are
// 1.5 MiB at most); Hugging Face configs are a few KB.
inline constexpr size_t kMaxHfConfig = 256 << 10;

// Parses and validates a ptc.json document; `file` names it in error messages. Unknown
// members are errors at every level.
Result<Ptc> parse_ptc_json(std::string_view text, const std::string& file);

// The canonical JSON text of a PTC (keys sorted, two-space indent, trailing newline).
std::string ptc_to_json(const Ptc& ptc);
// The same document as a value (for records that embed it, without a text round trip).
nlohmann::json ptc_json(const Ptc& ptc);
// ptc_json(ptc).dump(), written as text without the DOM (a step's record, at every change).
std::string ptc_json_text(const Ptc& ptc);

// A tensor name is '/'-separated components, none empty, "." or "..", none longer than
// 250 bytes, no NUL; the whole at most 4096 bytes.
Status validate_tensor_name(std::string_view name);
// The names of one PTC together (sorted, as Ptc keeps them): none is "__metadata__" (the
// safetensors header's own key: no rank file could hold it), and none is shown where another
// needs a folder (tensor "a" is the view file a.npy, so no other name may start with "a.npy/").
// Checked where a new PTC enters (import, HF import and ptc infer, a save into the mount), not
// where a stored step is loaded: a step stored before the check still loads (and is not shown).
Status validate_tensor_names(const std::vector<TensorSpec>& tensors);

// Job and step names: [A-Za-z0-9_.-]+, not starting with '.', at most 128 bytes.
Status validate_id(std::string_view what, std::string_view id);

}  // namespace ptcfs::ptc
