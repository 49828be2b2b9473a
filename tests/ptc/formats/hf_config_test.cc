#include "ptc/formats/hf_config.h"

#include <catch2/catch.hpp>

#include "ptc/model.h"

using namespace ptcfs;
using namespace ptcfs::ptc;
using namespace ptcfs::formats;

TEST_CASE("config.json: integers kept by name, key/value heads and head_dim derived as transformers does",
          "[hf_config]") {
  auto c = parse_hf_config(R"({"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "intermediate_size": 14336, "vocab_size": 32000, "tie_word_embeddings": false,
                               "rope_theta": 1000000.0, "architectures": ["MistralForCausalLM"], "sliding_window": null,
                               "text_config": {"hidden_size": 1}})",
                           "m/config.json");
  REQUIRE(c.is_ok());
  CHECK(c->values.at("num_key_value_heads") == 8);
  CHECK(c->values.at("head_dim") == 128);
  CHECK(c->values.at("hidden_size") == 4096);
  CHECK(c->values.count("rope_theta") == 0);
  CHECK(c->values.count("sliding_window") == 0);
  CHECK(c->tie_word_embeddings == false);
  CHECK(*eval_config_product(*c, "num_key_value_heads*head_dim", "r") == 1024);
  CHECK(*eval_config_product(*c, "3*hidden_size", "r") == 12288);
  CHECK(*eval_config_product(*c, "7", "r") == 7);
  // The whole document, as the hf/ view shows it: compact, keys sorted, the derived values not added.
  CHECK(c->json == R"({"architectures":["MistralForCausalLM"],"hidden_size":4096,"intermediate_size":14336,)"
                   R"("num_attention_heads":32,"num_key_value_heads":8,"rope_theta":1000000.0,"sliding_window":null,)"
                   R"("text_config":{"hidden_size":1},"tie_word_embeddings":false,"vocab_size":32000})");

  // Without num_key_value_heads every head is its own group; an explicit head_dim is kept.
  auto mha = parse_hf_config(R"({"hidden_size": 1024, "num_attention_heads": 16, "head_dim": 128})", "c");
  REQUIRE(mha.is_ok());
  CHECK(mha->values.at("num_key_value_heads") == 16);
  CHECK(mha->values.at("head_dim") == 128);
  CHECK_FALSE(mha->tie_word_embeddings.has_value());

  // Negative ids and numbers past 2^48 are no dimension: left out, so a rule naming one fails.
  auto ids = parse_hf_config(R"({"pad_token_id": -1, "hidden_size": -4, "big": 281474976710657})", "c");
  REQUIRE(ids.is_ok());
  CHECK(ids->values.empty());
}

TEST_CASE("config.json: what cannot describe a model is refused, naming the file and the member", "[hf_config]") {
  const auto refuse = [](const std::string& text, const std::string& message) {
    auto c = parse_hf_config(text, "m/config.json");
    REQUIRE_FALSE(c.is_ok());
    CHECK(c.status().code() == Code::kInvalidArgument);
    CHECK(c.status().message() == message);
  };
  refuse("[1]", "m/config.json: expected a JSON object");
  refuse(R"({"num_attention_heads": 12, "num_key_value_heads": 5})",
         "m/config.json: num_attention_heads (12) is not a multiple of num_key_value_heads (5)");
  refuse(R"({"num_attention_heads": 12, "num_key_value_heads": 0})",
         "m/config.json: num_attention_heads (12) is not a multiple of num_key_value_heads (0)");
  refuse(R"({"num_attention_heads": 0})", "m/config.json: num_attention_heads must be at least 1");
  refuse(R"({"tie_word_embeddings": "yes"})", "m/config.json: tie_word_embeddings must be true or false, got \"yes\"");
  auto bad = parse_hf_config("{", "m/config.json");
  REQUIRE_FALSE(bad.is_ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("m/config.json"));
}

TEST_CASE("config.json: past 256 KiB of JSON is refused (it rides in every step record)", "[hf_config]") {
  const std::string big = R"({"hidden_size": 4, "notes": ")" + std::string(kMaxHfConfig, 'x') + "\"}";
  auto r = parse_hf_config(big, "m/config.json");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().message() == "m/config.json: " + std::to_string(kMaxHfConfig + 28) +
                                    " bytes of JSON; ptcfs keeps a config of at most 262144");
  auto ok = parse_hf_config(R"({"hidden_size": 4, "notes": ")" + std::string(1000, 'x') + "\"}", "m/config.json");
  CHECK(ok.is_ok());
}

TEST_CASE("config products: names the config lacks, bad terms and overflow are refused", "[hf_config]") {
  auto c = parse_hf_config(R"({"a": 281474976710656, "b": 3})", "c");
  REQUIRE(c.is_ok());
  CHECK(eval_config_product(*c, "a*b*zz", "rule").status().message() == "rule: config.json has no integer 'zz'");
  CHECK(eval_config_product(*c, "a*a", "rule").status().message() == "rule: 'a*a' is larger than 2^62");
  for (const char* e : {"", "*", "a*", "a**b", "a+b", "-3", "b*-1", "3b", " a"}) {
    INFO(e);
    CHECK_THAT(eval_config_product(*c, e, "rule").status().message(),
               Catch::Contains("is not a product of integers and config.json names"));
    CHECK_FALSE(check_config_product(e, "rule").is_ok());
  }
  CHECK(check_config_product("num_key_value_heads*head_dim", "rule").is_ok());
}
