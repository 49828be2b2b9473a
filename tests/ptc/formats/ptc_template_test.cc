#include "ptc/formats/ptc_template.h"

#include <catch2/catch.hpp>

#include "ptc/formats/hf_checkpoint.h"
#include "ptc/layout.h"

using namespace ptcfs;
using namespace ptcfs::ptc;
using namespace ptcfs::formats;

namespace {

TensorInfo info(const std::string& name, Shape shape, DType dtype = DType::BF16) { return {name, dtype, shape}; }

// The tensors of a tiny Llama-style HF checkpoint: 2 layers, hidden 64, 4 heads of 16, 2 KV
// heads, ffn 128, vocab 1000 (not a multiple of 128: padded), untied lm_head.
std::vector<TensorInfo> tiny_llama(int layers = 2) {
  std::vector<TensorInfo> t{info("model.embed_tokens.weight", {1000, 64}), info("model.norm.weight", {64}),
                            info("lm_head.weight", {1000, 64})};
  for (int i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (auto& x : {info(p + "self_attn.q_proj.weight", {64, 64}), info(p + "self_attn.k_proj.weight", {32, 64}),
                    info(p + "self_attn.v_proj.weight", {32, 64}), info(p + "self_attn.o_proj.weight", {64, 64}),
                    info(p + "mlp.gate_proj.weight", {128, 64}), info(p + "mlp.up_proj.weight", {128, 64}),
                    info(p + "mlp.down_proj.weight", {64, 128}), info(p + "input_layernorm.weight", {64}),
                    info(p + "post_attention_layernorm.weight", {64}),
                    info(p + "self_attn.rotary_emb.inv_freq", {8}, DType::F32)})
      t.push_back(x);
  }
  return t;
}

SafetensorsHeader header_of(const std::vector<TensorInfo>& tensors) {
  std::vector<TensorDecl> decls;
  for (const auto& t : tensors) decls.push_back({t.name, t.dtype, t.shape});
  auto l = layout_safetensors(decls);
  REQUIRE(l.is_ok());
  SafetensorsHeader h;
  h.entries = l->entries;
  return h;
}

}  // namespace

TEST_CASE("template patterns: {layer} takes a decimal layer index, * any run of characters", "[template]") {
  std::optional<int64_t> layer;
  CHECK(template_match("model.layers.{layer}.mlp.up_proj.weight", "model.layers.17.mlp.up_proj.weight", layer));
  CHECK(layer == 17);
  CHECK(template_match("a.{layer}.*", "a.3.x.y", layer));
  CHECK(layer == 3);
  CHECK(template_match("*.bias", "x.y.bias", layer));
  CHECK_FALSE(layer.has_value());
  CHECK(template_match("a*", "a", layer));
  CHECK_FALSE(template_match("a.{layer}.b", "a.x.b", layer));
  CHECK_FALSE(template_match("a.{layer}.b", "a..b", layer));
  CHECK_FALSE(template_match("a.{layer}.b", "a.01.b", layer));  // not how a layer index is written
  CHECK_FALSE(template_match("a.b", "a.bc", layer));
  CHECK_FALSE(template_match("a.b.c", "a.b", layer));
  // Several stars: each may take any run, {layer} after one.
  CHECK(template_match("*.{layer}.*.weight", "model.x.12.mlp.down.weight", layer));
  CHECK(layer == 12);
  CHECK(template_match("*a*b*c*", "xxaxxbxxcxx", layer));
  CHECK_FALSE(template_match("*a*b*c*", "xxaxxcxxbxx", layer));
  CHECK_FALSE(layer.has_value());
  CHECK(template_match("**.bias", "x.bias", layer));
}

TEST_CASE("template patterns: many stars cost no more than the pattern times the name (found by fuzzing)",
          "[template]") {
  // Plain backtracking tried every split of the name among the stars: hours for this one.
  const std::string pattern = "mo" + std::string(70, '*') + "del.layers.{layer}.mlp.dowinv_freq";
  const std::string name = "model.layers.3.mlp.down_proj.weight" + std::string(200, 'x');
  std::optional<int64_t> layer;
  CHECK_FALSE(template_match(pattern, name, layer));
  CHECK(template_match(pattern, "model.layers.3.mlp.dowinv_freq", layer));
  CHECK(layer == 3);
}

TEST_CASE("llama template: q/k/v/gate/up split rows, o/down columns, norms replicated, vocab padded", "[template]") {
  auto t = builtin_template("llama");
  REQUIRE(t.is_ok());
  std::vector<std::string> skipped;
  auto p = infer_ptc(*t, tiny_llama(), Parallelism{2, 2, 1}, "ckpt", nullptr, &skipped);
  REQUIRE(p.is_ok());
  CHECK(p->num_layers == 2);
  CHECK(p->parallelism == Parallelism{2, 2, 1});
  CHECK(skipped == std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq",
                                            "model.layers.1.self_attn.rotary_emb.inv_freq"});
  CHECK(p->tensors.size() == 3 + 2 * 9);
  const TensorSpec* emb = p->find("model.embed_tokens.weight");
  REQUIRE(emb);
  CHECK(emb->tp_dim == 0);
  CHECK(emb->pad_to == 128);
  CHECK(emb->placement.kind == Placement::Kind::kFirst);
  const TensorSpec* head = p->find("lm_head.weight");
  REQUIRE(head);
  CHECK(head->placement.kind == Placement::Kind::kLast);
  CHECK(p->find("model.norm.weight")->placement.kind == Placement::Kind::kLast);
  CHECK_FALSE(p->find("model.norm.weight")->tp_dim.has_value());
  const TensorSpec* k = p->find("model.layers.1.self_attn.k_proj.weight");
  REQUIRE(k);
  CHECK(k->tp_dim == 0);
  CHECK(k->placement.kind == Placement::Kind::kLayer);
  CHECK(k->placement.layer == 1);
  CHECK(p->find("model.layers.0.self_attn.o_proj.weight")->tp_dim == 1);
  CHECK(p->find("model.layers.0.mlp.down_proj.weight")->tp_dim == 1);
  CHECK_FALSE(p->find("model.layers.0.input_layernorm.weight")->tp_dim.has_value());
  // The layout at tp=2, pp=2: layer 1 on stage 1, k split into two 16-row halves.
  auto layout = Layout::make(*p, p->parallelism);
  REQUIRE(layout.is_ok());
  const ShardId s{1, 1};
  const int at = layout->find_slice(s, static_cast<size_t>(k - p->tensors.data()));
  REQUIRE(at >= 0);
  CHECK(layout->slices(s)[static_cast<size_t>(at)].local_shape == Shape{16, 64});
  const ShardId first{0, 0};
  const int e = layout->find_slice(first, static_cast<size_t>(emb - p->tensors.data()));
  REQUIRE(e >= 0);
  CHECK(layout->slices(first)[static_cast<size_t>(e)].local_shape == Shape{512, 64});  // 1000 -> 1024 / 2
}

TEST_CASE("infer_ptc lists every tensor no rule matches, and names the checkpoint", "[template]") {
  auto t = builtin_template("llama");
  REQUIRE(t.is_ok());
  auto tensors = tiny_llama(1);
  tensors.push_back(info("model.layers.0.self_attn.q_norm.weight", {16}));
  tensors.push_back(info("vision_tower.patch.weight", {8, 8}));
  auto p = infer_ptc(*t, tensors, Parallelism{}, "/ck");
  REQUIRE_FALSE(p.is_ok());
  CHECK(p.status().message() ==
        "/ck: 2 tensors match no rule of template 'llama':\n  model.layers.0.self_attn.q_norm.weight\n  "
        "vision_tower.patch.weight");
}

TEST_CASE("templates: the shipped ones parse; files with unknown keys or bad fields are refused", "[template]") {
  for (const auto& name : builtin_template_names()) {
    INFO(name);
    auto t = builtin_template(name);
    REQUIRE(t.is_ok());
    CHECK(t->name == name);
    CHECK_FALSE(t->description.empty());
  }
  CHECK(builtin_template_names() ==
        std::vector<std::string>{"gpt2", "llama", "megatron-gpt", "megatron-swiglu", "neox"});
  auto missing = builtin_template("bert");
  REQUIRE_FALSE(missing.is_ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("no template named 'bert' (shipped: gpt2, llama"));
  const auto refuse = [](const std::string& text, const std::string& needle) {
    INFO(text);
    auto r = parse_template_json(text, "my.json");
    REQUIRE_FALSE(r.is_ok());
    CHECK_THAT(r.status().message(), Catch::Contains(needle));
  };
  refuse(R"({"name": "x", "rules": [{"match": "a", "tp": 0}]})", "my.json: rules[0]: unknown key 'tp'");
  refuse(R"({"name": "x", "rules": []})", "'rules' must be a non-empty list");
  refuse(R"({"name": "x", "rules": [{"match": "a.{layer}", "stage": "last"}]})", "takes its stage from the layer");
  refuse(R"({"name": "x", "rules": [{"match": "a", "stage": "middle"}]})", "stage must be");
  refuse(R"({"name": "x", "rules": [{"match": "a", "parts": 0}]})", "parts");
  refuse(R"({"name": "x", "rules": [{"match": "{layer}.{layer}"}]})", "holds {layer} twice");
  refuse(R"({"name": "x", "color": 1, "rules": [{"match": "a"}]})", "unknown key 'color'");
}

TEST_CASE("infer_ptc: a shape that does not divide at the asked tp is refused by the layout, naming the tensor",
          "[template]") {
  auto t = parse_template_json(R"({"name": "t", "rules": [{"match": "w", "tp_dim": 0}]})", "t.json");
  REQUIRE(t.is_ok());
  auto p = infer_ptc(*t, {info("w", {6, 4})}, Parallelism{4, 1, 1}, "ck");
  REQUIRE(p.is_ok());
  auto layout = Layout::make(*p, p->parallelism);
  REQUIRE_FALSE(layout.is_ok());
  CHECK_THAT(layout.status().message(), Catch::Contains("w"));
}

TEST_CASE("HF checkpoints: one file, or the index's files; the index must agree with the files", "[hf]") {
  CHECK(*hf_file_names({"config.json", "model.safetensors"}, std::nullopt, "d") ==
        std::vector<std::string>{"model.safetensors"});
  auto none = hf_file_names({"config.json"}, std::nullopt, "d");
  REQUIRE_FALSE(none.is_ok());
  CHECK_THAT(none.status().message(), Catch::Contains("d: no model.safetensors and no model.safetensors.index.json"));
  const std::string index =
      R"({"metadata": {"total_size": 1}, "weight_map": {"a": "model-00002-of-00002.safetensors",
                                                      "b": "model-00001-of-00002.safetensors"}})";
  const std::vector<std::string> listing{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  CHECK(*hf_file_names(listing, index, "d") == listing);
  // A model.safetensors beside an index that does not name it: not guessed which holds the weights.
  auto both = hf_file_names({listing[0], listing[1], "model.safetensors"}, index, "d");
  REQUIRE_FALSE(both.is_ok());
  CHECK(both.status().message() ==
        "d: both model.safetensors and model.safetensors.index.json, which does not name it: which one holds the "
        "weights is unclear; remove the other");
  const std::string one = R"({"weight_map": {"a": "model.safetensors"}})";  // an index of the one file: fine
  CHECK(*hf_file_names({"model.safetensors"}, one, "d") == std::vector<std::string>{"model.safetensors"});
  auto gone = hf_file_names({listing[0]}, index, "d");
  REQUIRE_FALSE(gone.is_ok());
  CHECK_THAT(
      gone.status().message(),
      Catch::Contains("d/model.safetensors.index.json names model-00002-of-00002.safetensors, which is not in d"));
  auto escape = hf_file_names(listing, R"({"weight_map": {"a": "../x.safetensors"}})", "d");
  REQUIRE_FALSE(escape.is_ok());
  CHECK_THAT(escape.status().message(), Catch::Contains("not a file of the directory"));
  auto twice = hf_file_names(listing, R"({"weight_map": {"a": "x", "a": "y"}})", "d");
  REQUIRE_FALSE(twice.is_ok());
  CHECK_THAT(twice.status().message(), Catch::Contains("duplicate key 'a'"));

  std::vector<HfFile> files{{listing[0], header_of({info("b", {2})})}, {listing[1], header_of({info("a", {3, 2})})}};
  auto tensors = hf_tensors(files, index, "d");
  REQUIRE(tensors.is_ok());
  REQUIRE(tensors->size() == 2);
  CHECK((*tensors)[0].info.name == "a");
  CHECK((*tensors)[0].file == 1);
  CHECK((*tensors)[0].info.shape == Shape{3, 2});
  CHECK((*tensors)[1].info.name == "b");
  CHECK((*tensors)[1].file == 0);

  auto wrong = hf_tensors({{listing[0], header_of({info("a", {3, 2}), info("b", {2})})}, files[1]}, index, "d");
  REQUIRE_FALSE(wrong.is_ok());
  CHECK_THAT(wrong.status().message(), Catch::Contains("tensor a is in both model-00001-of-00002.safetensors and "
                                                       "model-00002-of-00002.safetensors"));
  auto misplaced =
      hf_tensors({{listing[0], header_of({info("a", {3, 2})})}, {listing[1], header_of({info("b", {2})})}}, index, "d");
  REQUIRE_FALSE(misplaced.is_ok());
  CHECK_THAT(misplaced.status().message(), Catch::Contains("names tensor a in model-00002-of-00002.safetensors, but "
                                                           "it is in model-00001-of-00002.safetensors"));
  auto extra = hf_tensors({files[0], {listing[1], header_of({info("a", {3, 2}), info("c", {1})})}}, index, "d");
  REQUIRE_FALSE(extra.is_ok());
  CHECK_THAT(extra.status().message(), Catch::Contains("tensor c is not in model.safetensors.index.json"));
}

namespace {

// tiny_llama's config.json.
const char kTinyLlamaConfig[] = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
  "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
  "num_hidden_layers": 2, "tie_word_embeddings": false, "rope_theta": 10000.0, "torch_dtype": "bfloat16"})";

HfConfig config_of(const std::string& text) {
  auto c = parse_hf_config(text, "ck/config.json");
  INFO(c.status().to_string());
  REQUIRE(c.is_ok());
  return *c;
}

}  // namespace

TEST_CASE("llama template with config.json: q and o hold the attention heads, k and v the key/value heads",
          "[template]") {
  auto t = builtin_template("llama");
  REQUIRE(t.is_ok());
  const HfConfig config = config_of(kTinyLlamaConfig);
  auto p = infer_ptc(*t, tiny_llama(), Parallelism{2, 1, 1}, "ck", &config);
  INFO(p.status().to_string());
  REQUIRE(p.is_ok());
  CHECK(p->find("model.layers.0.self_attn.q_proj.weight")->heads == 4);
  CHECK(p->find("model.layers.1.self_attn.k_proj.weight")->heads == 2);
  CHECK(p->find("model.layers.1.self_attn.v_proj.weight")->heads == 2);
  CHECK(p->find("model.layers.0.self_attn.o_proj.weight")->heads == 4);
  CHECK(p->find("model.layers.0.mlp.up_proj.weight")->heads == 0);
  CHECK(p->find("model.embed_tokens.weight")->heads == 0);
  CHECK(Layout::make(*p, {2, 1, 1}).is_ok());
  // tp=4 divides every shape (k and v have 32 rows), but not the 2 key/value heads.
  for (int tp : {4, 8}) {
    auto l = Layout::make(*p, {tp, 1, 1});
    REQUIRE_FALSE(l.is_ok());
    CHECK(l.status().message() ==
          "tensor 'model.layers.0.self_attn.k_proj.weight': dimension 0 holds 2 heads, "
          "which tp=" +
              std::to_string(tp) + " does not divide (a rank would hold part of a head)");
  }
  // Without config.json nothing says where the heads are: the old behaviour.
  auto bare = infer_ptc(*t, tiny_llama(), Parallelism{4, 1, 1}, "ck");
  REQUIRE(bare.is_ok());
  CHECK(bare->find("model.layers.0.self_attn.k_proj.weight")->heads == 0);
  CHECK(Layout::make(*bare, {4, 1, 1}).is_ok());
}

TEST_CASE("llama template with config.json: shapes that disagree with it are all listed", "[template]") {
  auto t = builtin_template("llama");
  REQUIRE(t.is_ok());
  // config.json says 4 key/value heads (k, v: 64 rows) and a wider MLP than the files hold.
  const HfConfig config = config_of(R"({"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
                                       "intermediate_size": 256, "vocab_size": 1000})");
  auto p = infer_ptc(*t, tiny_llama(1), Parallelism{}, "ck", &config);
  REQUIRE_FALSE(p.is_ok());
  CHECK(p.status().message() ==
        "ck: 5 tensors disagree with config.json (template 'llama'):"
        "\n  model.layers.0.mlp.down_proj.weight: [64, 128] (config.json: [64, 256] = [hidden_size, intermediate_size])"
        "\n  model.layers.0.mlp.gate_proj.weight: [128, 64] (config.json: [256, 64] = [intermediate_size, hidden_size])"
        "\n  model.layers.0.mlp.up_proj.weight: [128, 64] (config.json: [256, 64] = [intermediate_size, hidden_size])"
        "\n  model.layers.0.self_attn.k_proj.weight: [32, 64] (config.json: [64, 64] = "
        "[num_key_value_heads*head_dim, hidden_size])"
        "\n  model.layers.0.self_attn.v_proj.weight: [32, 64] (config.json: [64, 64] = "
        "[num_key_value_heads*head_dim, hidden_size])");
  // A config.json without a value a rule needs.
  const HfConfig partial = config_of(R"({"hidden_size": 64, "num_attention_heads": 4})");
  auto q = infer_ptc(*t, tiny_llama(1), Parallelism{}, "ck", &partial);
  REQUIRE_FALSE(q.is_ok());
  CHECK_THAT(q.status().message(), Catch::Contains("config.json has no integer 'vocab_size'"));
}

TEST_CASE("llama template with config.json: an untied output layer must be there", "[template]") {
  auto t = builtin_template("llama");
  REQUIRE(t.is_ok());
  auto tensors = tiny_llama(1);
  std::erase_if(tensors, [](const TensorInfo& x) { return x.name == "lm_head.weight"; });
  const HfConfig untied = config_of(kTinyLlamaConfig);
  auto p = infer_ptc(*t, tensors, Parallelism{}, "ck", &untied);
  REQUIRE_FALSE(p.is_ok());
  CHECK(p.status().message() ==
        "ck: config.json says tie_word_embeddings is false, but the checkpoint has no tensor "
        "matching 'lm_head.weight'");
  HfConfig tied = untied;
  tied.tie_word_embeddings = true;
  CHECK(infer_ptc(*t, tensors, Parallelism{}, "ck", &tied).is_ok());
}

TEST_CASE("templates: heads and shape are products of integers and config.json names", "[template]") {
  auto t = parse_template_json(R"({"name": "t", "rules": [
      {"match": "qkv", "tp_dim": 0, "parts": 3, "heads": "n_head", "shape": ["3*n_embd", null]},
      {"match": "fixed", "tp_dim": 1, "heads": 6}]})",
                               "t.json");
  REQUIRE(t.is_ok());
  CHECK(rule_to_json(t->rules[0]) == nlohmann::json::parse(R"({"match": "qkv", "tp_dim": 0, "parts": 3,
                                                               "heads": "n_head", "shape": ["3*n_embd", null]})"));
  const std::vector<TensorInfo> tensors{info("qkv", {96, 5}), info("fixed", {2, 12})};
  // A plain number holds without config.json; a name needs it.
  auto bare = infer_ptc(*t, tensors, Parallelism{}, "ck");
  REQUIRE(bare.is_ok());
  CHECK(bare->find("fixed")->heads == 6);
  CHECK(bare->find("qkv")->heads == 0);
  const HfConfig config = config_of(R"({"n_head": 4, "n_embd": 32, "n_inner": null})");
  auto p = infer_ptc(*t, tensors, Parallelism{}, "ck", &config);
  REQUIRE(p.is_ok());
  CHECK(p->find("qkv")->heads == 4);
  CHECK(Layout::make(*p, {2, 1, 1}).is_ok());
  CHECK_THAT(Layout::make(*p, {4, 1, 1}).status().message(), Catch::Contains("tensor 'fixed': dimension 1 holds 6"));
  const auto refuse = [](const std::string& rule, const std::string& needle) {
    auto r = parse_template_json(R"({"name": "x", "rules": [)" + rule + "]}", "my.json");
    REQUIRE_FALSE(r.is_ok());
    CHECK_THAT(r.status().message(), Catch::Contains(needle));
  };
  refuse(R"({"match": "a", "heads": 2})", "my.json: rules[0]: 'heads' needs a 'tp_dim'");
  refuse(R"({"match": "a", "tp_dim": 0, "heads": "n_head+1"})", "'n_head+1' is not a product of integers");
  refuse(R"({"match": "a", "tp_dim": 0, "heads": "2**n"})", "is not a product");
  refuse(R"({"match": "a", "tp_dim": 0, "heads": 0})", "heads: 0 is outside");
  refuse(R"({"match": "a", "shape": "hidden_size"})", "shape must be a list");
  refuse(R"({"match": "a", "shape": [true]})", "shape[0]");
  refuse(R"({"match": "a", "required_if_untied": 1})", "required_if_untied must be true or false");
}
