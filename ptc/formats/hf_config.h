// config.json of a Hugging Face checkpoint: the model's dimensions, which a template's rules
// name to give a tensor its head count and to check its shape (docs/FORMATS.md "PTC
// templates"). Pure: the caller reads the file.
//
// Every top-level integer member in [0, 2^48] is kept under its own name (num_attention_heads,
// num_key_value_heads, hidden_size, intermediate_size, vocab_size, n_head, ...); other members
// (lists, strings, null, nested configs) are ignored, as config.json holds many. Two values
// are derived as transformers derives them when absent: num_key_value_heads =
// num_attention_heads (no grouped-query attention), head_dim = hidden_size /
// num_attention_heads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "ptc/base/status.h"

namespace ptcfs::formats {

inline constexpr char kHfConfigFile[] = "config.json";

struct HfConfig {
  std::map<std::string, int64_t, std::less<>> values;
  std::optional<bool> tie_word_embeddings;  // absent: not said
  std::string json;                         // the whole document: compact, keys sorted (ptc::Ptc::hf_config)
};

// Parses config.json; `where` names it in errors. Refused: not a JSON object, a
// tie_word_embeddings that is not true or false, and
// num_attention_heads not a multiple of num_key_value_heads (every query head must belong to
// one key/value group).
Result<HfConfig> parse_hf_config(std::string_view text, const std::string& where);

// The value of `expr`: integers and config names joined by '*' ("num_key_value_heads*head_dim",
// "3*n_embd"). kInvalidArgument naming `where` for a name the config lacks, a malformed
// expression or a product past 2^62.
Result<int64_t> eval_config_product(const HfConfig& config, std::string_view expr, const std::string& where);
// Whether `expr` is such a product, whatever config it is later evaluated with (a template is
// checked when parsed, before any checkpoint is read).
Status check_config_product(std::string_view expr, const std::string& where);

}  // namespace ptcfs::formats
