// PTC templates: rules that give every tensor of a checkpoint its partitioning from its name,
// so that a Hugging Face or Megatron checkpoint imports without a hand-written ptc.json
// (docs/FORMATS.md "PTC templates").
//
// A template is JSON:
//   {"name": "llama", "description": "...",
//    "rules": [{"match": "model.layers.{layer}.self_attn.q_proj.weight", "tp_dim": 0},
//              {"match": "model.embed_tokens.weight", "tp_dim": 0, "pad_to": 128, "stage": "first"},
//              {"match": "model.layers.{layer}.*", "stage": "all"} ...]}
// A pattern is literal text with two wildcards: `{layer}` matches a decimal number, the
// tensor's global layer index (its pipeline stage follows from it), and `*` matches any run
// of characters (none included). A tensor takes the first rule it matches. A rule may set
// `tp_dim`, `parts`, `pad_to` (as in ptc.json) and, for a pattern without `{layer}`, `stage`
// ("first", "last", "all" or a list of stage indices; default "first"). Unknown keys are
// errors. A rule with `"skip": true` leaves matching tensors out of the PTC (e.g. rotary
// inverse frequencies that some checkpoints carry and a model recomputes).
//
// With the checkpoint's config.json (ptc/formats/hf_config.h), a rule may also give `heads`, the
// number of heads along the split dimension ("num_key_value_heads"), which the PTC carries so
// that no layout splits a head; `shape`, one product per dimension ("num_attention_heads*
// head_dim", "hidden_size"; null: any) that the tensor's shape must equal; and
// `"required_if_untied": true` for a tensor that must be there when config.json says
// tie_word_embeddings is false. Without config.json these are not checked, and `heads` is set
// only when it is a plain number.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptc/formats/hf_config.h"
#include "ptc/model.h"

namespace ptcfs::formats {

struct TemplateRule {
  std::string match;
  nlohmann::json fields;  // tp_dim, parts, pad_to, stage as given (checked when parsed)
  bool skip = false;
  bool has_layer = false;  // the pattern holds {layer}
  // Read from config.json (checked as products when parsed).
  std::optional<std::string> heads;
  std::optional<std::vector<std::optional<std::string>>> shape;
  bool required_if_untied = false;
};

struct PtcTemplate {
  std::string name, description;
  std::vector<TemplateRule> rules;
};

// Parses a template file; `where` names it in errors.
Result<PtcTemplate> parse_template_json(std::string_view text, const std::string& where);

// The templates shipped with ptcfs, by name ("llama", "gpt2", "neox", "megatron-gpt").
std::vector<std::string> builtin_template_names();
Result<PtcTemplate> builtin_template(const std::string& name);

// Whether `name` matches `pattern`; the layer index of its {layer}, if any, in `layer`.
bool template_match(std::string_view pattern, std::string_view name, std::optional<int64_t>& layer);

// A rule as a template file writes it (for `ptcfs ptc templates --json`).
nlohmann::json rule_to_json(const TemplateRule& r);

struct TensorInfo {
  std::string name;
  ptc::DType dtype = ptc::DType::F32;
  ptc::Shape shape;
};

// The PTC the template gives `tensors` at `parallelism`: num_layers is the largest layer
// index + 1. Every tensor must match a rule: the error lists every one that does not
// (`where` names the checkpoint). Skipped tensors are left out (their names in `skipped`).
// `config`, the checkpoint's config.json when it has one, gives the rules' heads and is
// checked against their shapes: the error lists every tensor whose shape differs.
Result<ptc::Ptc> infer_ptc(const PtcTemplate& t, const std::vector<TensorInfo>& tensors,
                           const ptc::Parallelism& parallelism, const std::string& where,
                           const HfConfig* config = nullptr, std::vector<std::string>* skipped = nullptr);

}  // namespace ptcfs::formats
