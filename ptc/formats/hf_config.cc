#include "ptc/formats/hf_config.h"

#include <charconv>

#include "ptc/base/json_util.h"
#include "ptc/model.h"

namespace ptcfs::formats {

using nlohmann::json;

namespace {

constexpr int64_t kMaxValue = int64_t{1} << 48;
constexpr int64_t kMaxProduct = int64_t{1} << 62;

bool is_name(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// The product of `expr`'s terms; each name counts 1 when `config` is null (a syntax check).
Result<int64_t> product(const HfConfig* config, std::string_view expr, const std::string& where) {
  const std::string quoted = "'" + std::string(expr) + "'";
  int64_t result = 1;
  size_t pos = 0;
  while (true) {
    const size_t star = expr.find('*', pos);
    const std::string_view term =
        expr.substr(pos, star == std::string_view::npos ? std::string_view::npos : star - pos);
    int64_t v = 0;
    if (is_name(term)) {
      if (!config) {
        v = 1;
      } else if (auto it = config->values.find(term); it == config->values.end()) {
        return invalid(where + ": " + std::string(kHfConfigFile) + " has no integer '" + std::string(term) + "'");
      } else {
        v = it->second;
      }
    } else {
      auto [end, ec] = std::from_chars(term.data(), term.data() + term.size(), v);
      if (term.empty() || ec != std::errc() || end != term.data() + term.size() || v < 0 || v > kMaxValue)
        return invalid(where + ": " + quoted + " is not a product of integers and " + kHfConfigFile + " names");
    }
    if (__builtin_mul_overflow(result, v, &result) || result > kMaxProduct)
      return invalid(where + ": " + quoted + " is larger than 2^62");
    if (star == std::string_view::npos) return result;
    pos = star + 1;
  }
}

}  // namespace

Result<HfConfig> parse_hf_config(std::string_view text, const std::string& where) {
  PTC_ASSIGN_OR_RETURN(json doc, parse_json(text, where));
  if (!doc.is_object()) return invalid(where + ": expected a JSON object");
  HfConfig c;
  c.json = doc.dump();
  if (c.json.size() > ptc::kMaxHfConfig)
    return invalid(where + ": " + std::to_string(c.json.size()) + " bytes of JSON; ptcfs keeps a config of at most " +
                   std::to_string(ptc::kMaxHfConfig));
  for (const auto& [key, v] : doc.items()) {
    if (key == "tie_word_embeddings") {
      if (!v.is_boolean()) return invalid(where + ": tie_word_embeddings must be true or false, got " + v.dump());
      c.tie_word_embeddings = v.get<bool>();
    } else if (v.is_number_integer()) {
      // Ids such as "pad_token_id": -1 are no dimension: left out.
      if (auto n = get_int(v, key, 0, kMaxValue); n) c.values[key] = *n;
    }
  }
  auto heads = c.values.find("num_attention_heads");
  if (heads != c.values.end()) {
    if (heads->second < 1) return invalid(where + ": num_attention_heads must be at least 1");
    auto [kv, added] = c.values.emplace("num_key_value_heads", heads->second);
    if (kv->second < 1 || heads->second % kv->second != 0)
      return invalid(where + ": num_attention_heads (" + std::to_string(heads->second) +
                     ") is not a multiple of num_key_value_heads (" + std::to_string(kv->second) + ")");
    auto hidden = c.values.find("hidden_size");
    if (hidden != c.values.end() && hidden->second % heads->second == 0)
      c.values.emplace("head_dim", hidden->second / heads->second);
  }
  return c;
}

Result<int64_t> eval_config_product(const HfConfig& config, std::string_view expr, const std::string& where) {
  return product(&config, expr, where);
}

Status check_config_product(std::string_view expr, const std::string& where) {
  return product(nullptr, expr, where).status();
}

}  // namespace ptcfs::formats
