#include "ptc/formats/ptc_template.h"

#include <algorithm>
#include <map>

#include "ptc/base/json_util.h"

namespace ptcfs::formats {

using nlohmann::json;

namespace {

constexpr std::string_view kLayer = "{layer}";

// The shipped templates. Rules follow Megatron-LM's tensor parallelism: column-parallel
// weights (q, k, v, gate, up, fused QKV, h->4h) split their output rows, row-parallel ones
// (attention output, down, 4h->h) their input columns; norms and row-parallel biases are
// replicated; the vocabulary is padded to a multiple of 128 x tp as Megatron pads it.
// GPT-2's Conv1D weights are stored transposed ([in, out]), so their split dimensions are the
// other way round, and its fused c_attn is three parts (q | k | v) along the output.
// The attention tensors carry their head counts from config.json (grouped-query attention:
// k and v hold num_key_value_heads; NeoX's fused QKV interleaves per head, so its rows are
// num_attention_heads heads of q, k and v), and every shape config.json fixes is checked.
const std::map<std::string, std::string>& builtins() {
  static const std::map<std::string, std::string> t = {
      {"llama", R"T({"name": "llama",
  "description": "Hugging Face Llama, Mistral, Qwen2 style (LlamaForCausalLM): q/k/v/o, gate/up/down, GQA, tied or untied embeddings",
  "rules": [
    {"match": "model.embed_tokens.weight", "tp_dim": 0, "pad_to": 128, "stage": "first", "shape": ["vocab_size", "hidden_size"]},
    {"match": "model.layers.{layer}.self_attn.q_proj.weight", "tp_dim": 0, "heads": "num_attention_heads",
     "shape": ["num_attention_heads*head_dim", "hidden_size"]},
    {"match": "model.layers.{layer}.self_attn.q_proj.bias", "tp_dim": 0, "heads": "num_attention_heads",
     "shape": ["num_attention_heads*head_dim"]},
    {"match": "model.layers.{layer}.self_attn.k_proj.weight", "tp_dim": 0, "heads": "num_key_value_heads",
     "shape": ["num_key_value_heads*head_dim", "hidden_size"]},
    {"match": "model.layers.{layer}.self_attn.k_proj.bias", "tp_dim": 0, "heads": "num_key_value_heads",
     "shape": ["num_key_value_heads*head_dim"]},
    {"match": "model.layers.{layer}.self_attn.v_proj.weight", "tp_dim": 0, "heads": "num_key_value_heads",
     "shape": ["num_key_value_heads*head_dim", "hidden_size"]},
    {"match": "model.layers.{layer}.self_attn.v_proj.bias", "tp_dim": 0, "heads": "num_key_value_heads",
     "shape": ["num_key_value_heads*head_dim"]},
    {"match": "model.layers.{layer}.self_attn.o_proj.weight", "tp_dim": 1, "heads": "num_attention_heads",
     "shape": ["hidden_size", "num_attention_heads*head_dim"]},
    {"match": "model.layers.{layer}.self_attn.o_proj.bias", "shape": ["hidden_size"]},
    {"match": "model.layers.{layer}.self_attn.rotary_emb.inv_freq", "skip": true},
    {"match": "model.layers.{layer}.mlp.gate_proj.weight", "tp_dim": 0, "shape": ["intermediate_size", "hidden_size"]},
    {"match": "model.layers.{layer}.mlp.up_proj.weight", "tp_dim": 0, "shape": ["intermediate_size", "hidden_size"]},
    {"match": "model.layers.{layer}.mlp.down_proj.weight", "tp_dim": 1, "shape": ["hidden_size", "intermediate_size"]},
    {"match": "model.layers.{layer}.input_layernorm.weight", "shape": ["hidden_size"]},
    {"match": "model.layers.{layer}.post_attention_layernorm.weight", "shape": ["hidden_size"]},
    {"match": "model.norm.weight", "stage": "last", "shape": ["hidden_size"]},
    {"match": "lm_head.weight", "tp_dim": 0, "pad_to": 128, "stage": "last", "shape": ["vocab_size", "hidden_size"],
     "required_if_untied": true}
  ]})T"},
      {"gpt2", R"T({"name": "gpt2",
  "description": "Hugging Face GPT-2 (GPT2LMHeadModel; Conv1D weights stored [in, out])",
  "rules": [
    {"match": "transformer.wte.weight", "tp_dim": 0, "pad_to": 128, "stage": "first", "shape": ["vocab_size", "n_embd"]},
    {"match": "transformer.wpe.weight", "stage": "first"},
    {"match": "transformer.h.{layer}.ln_1.*"},
    {"match": "transformer.h.{layer}.attn.c_attn.weight", "tp_dim": 1, "parts": 3, "heads": "n_head",
     "shape": ["n_embd", "3*n_embd"]},
    {"match": "transformer.h.{layer}.attn.c_attn.bias", "tp_dim": 0, "parts": 3, "heads": "n_head", "shape": ["3*n_embd"]},
    {"match": "transformer.h.{layer}.attn.c_proj.weight", "tp_dim": 0, "heads": "n_head", "shape": ["n_embd", "n_embd"]},
    {"match": "transformer.h.{layer}.attn.c_proj.bias"},
    {"match": "transformer.h.{layer}.attn.bias", "skip": true},
    {"match": "transformer.h.{layer}.attn.masked_bias", "skip": true},
    {"match": "transformer.h.{layer}.ln_2.*"},
    {"match": "transformer.h.{layer}.mlp.c_fc.weight", "tp_dim": 1},
    {"match": "transformer.h.{layer}.mlp.c_fc.bias", "tp_dim": 0},
    {"match": "transformer.h.{layer}.mlp.c_proj.weight", "tp_dim": 0},
    {"match": "transformer.h.{layer}.mlp.c_proj.bias"},
    {"match": "transformer.ln_f.*", "stage": "last"},
    {"match": "lm_head.weight", "tp_dim": 0, "pad_to": 128, "stage": "last"}
  ]})T"},
      {"neox", R"T({"name": "neox",
  "description": "Hugging Face GPT-NeoX and Pythia (GPTNeoXForCausalLM; fused QKV interleaved per head)",
  "rules": [
    {"match": "gpt_neox.embed_in.weight", "tp_dim": 0, "pad_to": 128, "stage": "first", "shape": ["vocab_size", "hidden_size"]},
    {"match": "gpt_neox.layers.{layer}.input_layernorm.*"},
    {"match": "gpt_neox.layers.{layer}.post_attention_layernorm.*"},
    {"match": "gpt_neox.layers.{layer}.attention.query_key_value.weight", "tp_dim": 0, "heads": "num_attention_heads",
     "shape": ["3*hidden_size", "hidden_size"]},
    {"match": "gpt_neox.layers.{layer}.attention.query_key_value.bias", "tp_dim": 0, "heads": "num_attention_heads",
     "shape": ["3*hidden_size"]},
    {"match": "gpt_neox.layers.{layer}.attention.dense.weight", "tp_dim": 1, "heads": "num_attention_heads",
     "shape": ["hidden_size", "hidden_size"]},
    {"match": "gpt_neox.layers.{layer}.attention.dense.bias"},
    {"match": "gpt_neox.layers.{layer}.attention.rotary_emb.inv_freq", "skip": true},
    {"match": "gpt_neox.layers.{layer}.attention.bias", "skip": true},
    {"match": "gpt_neox.layers.{layer}.attention.masked_bias", "skip": true},
    {"match": "gpt_neox.layers.{layer}.mlp.dense_h_to_4h.*", "tp_dim": 0},
    {"match": "gpt_neox.layers.{layer}.mlp.dense_4h_to_h.weight", "tp_dim": 1},
    {"match": "gpt_neox.layers.{layer}.mlp.dense_4h_to_h.bias"},
    {"match": "gpt_neox.final_layer_norm.*", "stage": "last"},
    {"match": "embed_out.weight", "tp_dim": 0, "pad_to": 128, "stage": "last", "shape": ["vocab_size", "hidden_size"],
     "required_if_untied": true}
  ]})T"},
      {"megatron-gpt", R"T({"name": "megatron-gpt",
  "description": "Megatron-LM GPT with global names (embedding., layers.N., final_layernorm., output_layer.); GeLU MLP",
  "rules": [
    {"match": "embedding.word_embeddings.weight", "tp_dim": 0, "pad_to": 128, "stage": "first"},
    {"match": "embedding.position_embeddings.weight", "stage": "first"},
    {"match": "layers.{layer}.input_layernorm.*"},
    {"match": "layers.{layer}.self_attention.query_key_value.*", "tp_dim": 0},
    {"match": "layers.{layer}.self_attention.dense.weight", "tp_dim": 1},
    {"match": "layers.{layer}.self_attention.dense.bias"},
    {"match": "layers.{layer}.post_attention_layernorm.*"},
    {"match": "layers.{layer}.mlp.dense_h_to_4h.*", "tp_dim": 0},
    {"match": "layers.{layer}.mlp.dense_4h_to_h.weight", "tp_dim": 1},
    {"match": "layers.{layer}.mlp.dense_4h_to_h.bias"},
    {"match": "final_layernorm.*", "stage": "last"},
    {"match": "output_layer.weight", "tp_dim": 0, "pad_to": 128, "stage": "last"}
  ]})T"},
      {"megatron-swiglu", R"T({"name": "megatron-swiglu",
  "description": "Megatron-LM Llama-style models with global names: fused QKV, SwiGLU h->4h as two parts (gate | up)",
  "rules": [
    {"match": "embedding.word_embeddings.weight", "tp_dim": 0, "pad_to": 128, "stage": "first"},
    {"match": "layers.{layer}.input_layernorm.*"},
    {"match": "layers.{layer}.self_attention.query_key_value.*", "tp_dim": 0},
    {"match": "layers.{layer}.self_attention.dense.weight", "tp_dim": 1},
    {"match": "layers.{layer}.self_attention.dense.bias"},
    {"match": "layers.{layer}.post_attention_layernorm.*"},
    {"match": "layers.{layer}.mlp.dense_h_to_4h.*", "tp_dim": 0, "parts": 2},
    {"match": "layers.{layer}.mlp.dense_4h_to_h.weight", "tp_dim": 1},
    {"match": "layers.{layer}.mlp.dense_4h_to_h.bias"},
    {"match": "final_layernorm.*", "stage": "last"},
    {"match": "output_layer.weight", "tp_dim": 0, "pad_to": 128, "stage": "last"}
  ]})T"},
  };
  return t;
}

// Matches one token of the pattern at the start of n: a literal character, or {layer}
// (1 to 9 digits, no leading zero, all the digits there are up to 9). How many bytes of n
// it took, or npos.
size_t match_token(std::string_view p, std::string_view n, std::optional<int64_t>& layer, size_t& token_len) {
  if (p.substr(0, kLayer.size()) == kLayer) {
    token_len = kLayer.size();
    size_t digits = 0;
    while (digits < n.size() && digits < 9 && n[digits] >= '0' && n[digits] <= '9') ++digits;
    if (digits == 0 || (digits > 1 && n[0] == '0')) return std::string_view::npos;
    layer = std::stoll(std::string(n.substr(0, digits)));
    return digits;
  }
  token_len = 1;
  return !n.empty() && n.front() == p.front() ? 1 : std::string_view::npos;
}

// Glob matching with '*' (any run of characters) and {layer}, in O(|pattern| x |name|): on a
// mismatch only the last '*' takes one more character (the tokens between stars match in one
// way at a given place, and the leftmost place that matches is never worse), so a pattern of
// many stars cannot make it exponential as plain backtracking would be.
bool match_from(std::string_view p, std::string_view n, std::optional<int64_t>& layer) {
  size_t pi = 0, ni = 0;
  size_t star_p = std::string_view::npos, star_n = 0;
  while (ni < n.size() || pi < p.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = ++pi;  // the pattern after the star
      star_n = ni;    // what the star has taken so far ends here
      continue;
    }
    if (pi < p.size()) {
      size_t token_len = 0;
      const size_t took = match_token(p.substr(pi), n.substr(ni), layer, token_len);
      if (took != std::string_view::npos) {
        pi += token_len;
        ni += took;
        continue;
      }
    }
    if (star_p == std::string_view::npos || star_n >= n.size()) return false;
    pi = star_p;  // the last star takes one more character
    ni = ++star_n;
  }
  return true;
}

// A product of integers and config.json names, given as a string or a plain integer.
Result<std::string> parse_product(const json& v, const std::string& where) {
  if (v.is_number_integer()) {
    PTC_ASSIGN_OR_RETURN(int64_t n, get_int(v, where, 1, int64_t{1} << 48));
    return std::to_string(n);
  }
  PTC_ASSIGN_OR_RETURN(std::string e, get_string(v, where));
  PTC_RETURN_IF_ERROR(check_config_product(e, where));
  return e;
}

Status parse_config_keys(const json& r, TemplateRule& rule, const std::string& where) {
  if (r.contains("heads")) {
    if (!r.contains("tp_dim")) return invalid(where + ": 'heads' needs a 'tp_dim'");
    PTC_ASSIGN_OR_RETURN(rule.heads, parse_product(r["heads"], where + ": heads"));
  }
  if (r.contains("shape")) {
    const json& sh = r["shape"];
    if (!sh.is_array() || sh.size() > 16)
      return invalid(where + ": shape must be a list of at most 16 products (or null for any size)");
    rule.shape.emplace();
    for (size_t i = 0; i < sh.size(); ++i) {
      if (sh[i].is_null()) {
        rule.shape->push_back(std::nullopt);
        continue;
      }
      PTC_ASSIGN_OR_RETURN(std::string e, parse_product(sh[i], where + ": shape[" + std::to_string(i) + "]"));
      rule.shape->push_back(std::move(e));
    }
  }
  if (r.contains("required_if_untied")) {
    if (!r["required_if_untied"].is_boolean()) return invalid(where + ": required_if_untied must be true or false");
    rule.required_if_untied = r["required_if_untied"].get<bool>();
  }
  return Status::ok();
}

// The differences between a tensor's shape and the one its rule gives from config.json, as
// "[1024, 4096] (config.json: [512, 4096] = [num_key_value_heads*head_dim, hidden_size])", or
// "" when they agree.
Result<std::string> shape_mismatch(const TemplateRule& rule, const HfConfig& config, const TensorInfo& tensor,
                                   const std::string& where) {
  std::string want, exprs;
  bool same = rule.shape->size() == tensor.shape.size();
  for (size_t i = 0; i < rule.shape->size(); ++i) {
    const auto& e = (*rule.shape)[i];
    std::string w = "*";
    if (e) {
      PTC_ASSIGN_OR_RETURN(int64_t n, eval_config_product(config, *e, where));
      w = std::to_string(n);
      if (i < tensor.shape.size() && tensor.shape[i] != n) same = false;
    }
    want += (i ? ", " : "") + w;
    exprs += (i ? ", " : "") + (e ? *e : std::string("any"));
  }
  if (same) return std::string();
  std::string got;
  for (size_t i = 0; i < tensor.shape.size(); ++i) got += (i ? ", " : "") + std::to_string(tensor.shape[i]);
  return "[" + got + "] (" + kHfConfigFile + ": [" + want + "] = [" + exprs + "])";
}

std::string name_list(const std::vector<std::string>& lines) {
  std::string list;
  for (size_t i = 0; i < lines.size() && i < 50; ++i) list += "\n  " + lines[i];
  if (lines.size() > 50) list += "\n  ... and " + std::to_string(lines.size() - 50) + " more";
  return list;
}

Result<TemplateRule> parse_rule(const json& r, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_members(
      r, {"match", "tp_dim", "parts", "pad_to", "stage", "skip", "heads", "shape", "required_if_untied"}, where));
  TemplateRule rule;
  PTC_ASSIGN_OR_RETURN(rule.match, member_string(r, "match", where));
  if (rule.match.empty()) return invalid(where + ": match is empty");
  const size_t first = rule.match.find(kLayer);
  rule.has_layer = first != std::string::npos;
  if (rule.has_layer && rule.match.find(kLayer, first + 1) != std::string::npos)
    return invalid(where + ": match '" + rule.match + "' holds {layer} twice");
  if (r.contains("skip")) {
    if (!r["skip"].is_boolean()) return invalid(where + ": skip must be true or false");
    rule.skip = r["skip"].get<bool>();
  }
  if (r.contains("tp_dim")) PTC_RETURN_IF_ERROR(get_int(r["tp_dim"], where + ": tp_dim", 0, 64).status());
  if (r.contains("parts")) PTC_RETURN_IF_ERROR(get_int(r["parts"], where + ": parts", 1, 1 << 20).status());
  if (r.contains("pad_to")) PTC_RETURN_IF_ERROR(get_int(r["pad_to"], where + ": pad_to", 0, int64_t{1} << 40).status());
  if (r.contains("stage")) {
    if (rule.has_layer) return invalid(where + ": a rule with {layer} takes its stage from the layer; drop 'stage'");
    const json& s = r["stage"];
    const bool named = s.is_string() && (s == "first" || s == "last" || s == "all");
    const bool listed = s.is_array() && !s.empty() &&
                        std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_number_integer(); });
    if (!named && !listed)
      return invalid(where + ": stage must be \"first\", \"last\", \"all\" or a list of stage indices, got " +
                     s.dump());
  }
  for (const char* k : {"tp_dim", "parts", "pad_to", "stage"})
    if (r.contains(k)) rule.fields[k] = r[k];
  PTC_RETURN_IF_ERROR(parse_config_keys(r, rule, where));
  return rule;
}

}  // namespace

bool template_match(std::string_view pattern, std::string_view name, std::optional<int64_t>& layer) {
  layer.reset();
  if (match_from(pattern, name, layer)) return true;
  layer.reset();  // a capture of an attempt that failed
  return false;
}

Result<PtcTemplate> parse_template_json(std::string_view text, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(json doc, parse_json(text, where));
  PTC_RETURN_IF_ERROR(check_members(doc, {"name", "description", "rules"}, where));
  PtcTemplate t;
  PTC_ASSIGN_OR_RETURN(t.name, member_string(doc, "name", where));
  PTC_ASSIGN_OR_RETURN(t.description, member_string_or(doc, "description", "", where));
  if (!doc.contains("rules") || !doc["rules"].is_array() || doc["rules"].empty())
    return invalid(where + ": 'rules' must be a non-empty list");
  for (size_t i = 0; i < doc["rules"].size(); ++i) {
    PTC_ASSIGN_OR_RETURN(TemplateRule r, parse_rule(doc["rules"][i], where + ": rules[" + std::to_string(i) + "]"));
    t.rules.push_back(std::move(r));
  }
  return t;
}

std::vector<std::string> builtin_template_names() {
  std::vector<std::string> out;
  for (const auto& [name, text] : builtins()) out.push_back(name);
  return out;
}

Result<PtcTemplate> builtin_template(const std::string& name) {
  auto it = builtins().find(name);
  if (it == builtins().end()) {
    std::string names;
    for (const auto& n : builtin_template_names()) names += (names.empty() ? "" : ", ") + n;
    return not_found("no template named '" + name + "' (shipped: " + names + "; or give a template file's path)");
  }
  return parse_template_json(it->second, "template " + name);
}

json rule_to_json(const TemplateRule& r) {
  json j = r.fields;
  j["match"] = r.match;
  if (r.skip) j["skip"] = true;
  if (r.heads) j["heads"] = *r.heads;
  if (r.shape) {
    j["shape"] = json::array();
    for (const auto& e : *r.shape) j["shape"].push_back(e ? json(*e) : json());
  }
  if (r.required_if_untied) j["required_if_untied"] = true;
  return j;
}

Result<ptc::Ptc> infer_ptc(const PtcTemplate& t, const std::vector<TensorInfo>& tensors,
                           const ptc::Parallelism& parallelism, const std::string& where, const HfConfig* config,
                           std::vector<std::string>* skipped) {
  json specs = json::object();
  std::vector<std::string> unmatched, mismatched;
  std::vector<bool> used(t.rules.size(), false);
  const HfConfig none;
  int64_t layers = 0;
  for (const auto& tensor : tensors) {
    const TemplateRule* rule = nullptr;
    std::optional<int64_t> layer;
    for (const auto& r : t.rules)
      if (template_match(r.match, tensor.name, layer)) {
        rule = &r;
        break;
      }
    if (!rule) {
      unmatched.push_back(tensor.name);
      continue;
    }
    used[static_cast<size_t>(rule - t.rules.data())] = true;
    if (rule->skip) {
      if (skipped) skipped->push_back(tensor.name);
      continue;
    }
    json spec = rule->fields;
    spec["dtype"] = std::string(ptc::dtype_name(tensor.dtype));
    spec["shape"] = tensor.shape;
    if (layer) {
      spec["layer"] = *layer;
      layers = std::max(layers, *layer + 1);
    }
    const std::string at = where + ": tensor " + tensor.name + " (rule '" + rule->match + "')";
    // Without config.json a head count is known only when the rule states it as a number.
    const bool literal = rule->heads && eval_config_product(none, *rule->heads, "").is_ok();
    if (rule->heads && (config || literal)) {
      PTC_ASSIGN_OR_RETURN(spec["heads"], eval_config_product(config ? *config : none, *rule->heads, at));
    }
    if (rule->shape && config) {
      PTC_ASSIGN_OR_RETURN(std::string diff, shape_mismatch(*rule, *config, tensor, at));
      if (!diff.empty()) mismatched.push_back(tensor.name + ": " + diff);
    }
    specs[tensor.name] = std::move(spec);
  }
  if (!unmatched.empty())
    return invalid(where + ": " + std::to_string(unmatched.size()) + " tensor" + (unmatched.size() == 1 ? "" : "s") +
                   " match no rule of template '" + t.name + "':" + name_list(unmatched));
  if (!mismatched.empty()) {
    std::sort(mismatched.begin(), mismatched.end());
    return invalid(where + ": " + std::to_string(mismatched.size()) +
                   (mismatched.size() == 1 ? " tensor disagrees" : " tensors disagree") + " with " + kHfConfigFile +
                   " (template '" + t.name + "'):" + name_list(mismatched));
  }
  if (config && config->tie_word_embeddings == false)
    for (size_t i = 0; i < t.rules.size(); ++i)
      if (t.rules[i].required_if_untied && !used[i])
        return invalid(where + ": " + kHfConfigFile +
                       " says tie_word_embeddings is false, but the checkpoint has no tensor matching '" +
                       t.rules[i].match + "'");
  if (specs.empty()) return invalid(where + ": template '" + t.name + "' leaves no tensor");
  const json doc = {{"parallelism", {{"tp", parallelism.tp}, {"pp", parallelism.pp}, {"dp", parallelism.dp}}},
                    {"num_layers", layers},
                    {"tensors", std::move(specs)}};
  PTC_ASSIGN_OR_RETURN(ptc::Ptc ptc, ptc::parse_ptc_json(doc.dump(), where + " (with template '" + t.name + "')"));
  PTC_RETURN_IF_ERROR(ptc::validate_tensor_names(ptc.tensors).with_context(where));
  return ptc;
}

}  // namespace ptcfs::formats
