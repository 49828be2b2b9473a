#include "ptc/model.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <string>

using namespace ptcfs;
using namespace ptcfs::ptc;

namespace {

const std::string kFile = "ckpt/ptc.json";

// The example of docs/FORMATS.md "ptc.json", verbatim.
const std::string kDesignExample = R"({
  "parallelism": {"tp": 4, "pp": 2, "dp": 2},
  "num_layers": 4,
  "tensors": {
    "embedding.word_embeddings.weight": {"dtype": "BF16", "shape": [50257, 1024], "tp_dim": 0, "pad_to": 128, "stage": "first"},
    "layers.0.self_attention.query_key_value.weight": {"dtype": "BF16", "shape": [3072, 1024], "tp_dim": 0, "layer": 0},
    "layers.0.self_attention.dense.weight": {"dtype": "BF16", "shape": [1024, 1024], "tp_dim": 1, "layer": 0},
    "layers.0.mlp.dense_h_to_4h.weight": {"dtype": "BF16", "shape": [8192, 1024], "tp_dim": 0, "parts": 2, "layer": 0},
    "layers.0.input_layernorm.weight": {"dtype": "BF16", "shape": [1024], "layer": 0},
    "final_layernorm.weight": {"dtype": "BF16", "shape": [1024], "stage": "last"}
  }
})";

// A document with tp=2, pp=2, 4 layers and one tensor `name` whose JSON object is `body`.
std::string doc_with(const std::string& name, const std::string& body) {
  return R"({"parallelism": {"tp": 2, "pp": 2, "dp": 1}, "num_layers": 4, "tensors": {")" + name + R"(": )" + body +
         "}}";
}

// Expects parse_ptc_json(text) to fail with kInvalidArgument, naming the file and every needle.
void expect_invalid(const std::string& text, std::initializer_list<std::string> needles) {
  INFO("document: " << text);
  auto r = parse_ptc_json(text, kFile);
  REQUIRE_FALSE(r.is_ok());
  INFO("message: " << r.status().message());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains(kFile));
  for (const auto& n : needles) CHECK_THAT(r.status().message(), Catch::Contains(n));
}

void expect_tensor_invalid(const std::string& name, const std::string& body, const std::string& needle) {
  expect_invalid(doc_with(name, body), {"tensor '" + name + "'", needle});
}

void check_same(const Ptc& a, const Ptc& b) {
  CHECK(a.parallelism == b.parallelism);
  CHECK(a.num_layers == b.num_layers);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const TensorSpec& x = a.tensors[i];
    const TensorSpec& y = b.tensors[i];
    INFO("tensor " << x.name);
    CHECK(x.name == y.name);
    CHECK(x.dtype == y.dtype);
    CHECK(x.shape == y.shape);
    CHECK(x.tp_dim == y.tp_dim);
    CHECK(x.parts == y.parts);
    CHECK(x.pad_to == y.pad_to);
    CHECK(x.heads == y.heads);
    CHECK(x.placement.kind == y.placement.kind);
    CHECK(x.placement.layer == y.placement.layer);
    CHECK(x.placement.stages == y.placement.stages);
  }
}

}  // namespace

TEST_CASE("parse_ptc_json accepts the docs/FORMATS.md example with every field as written", "[model]") {
  auto r = parse_ptc_json(kDesignExample, kFile);
  REQUIRE(r.is_ok());
  const Ptc& p = *r;
  CHECK(p.parallelism == Parallelism{4, 2, 2});
  CHECK(p.num_layers == 4);
  REQUIRE(p.tensors.size() == 6);

  // Sorted by name.
  const auto& emb = p.tensors[0];
  CHECK(emb.name == "embedding.word_embeddings.weight");
  CHECK(emb.dtype == DType::BF16);
  CHECK(emb.shape == Shape{50257, 1024});
  CHECK(emb.tp_dim == std::optional<int>(0));
  CHECK(emb.parts == 1);
  CHECK(emb.pad_to == 128);
  CHECK(emb.placement.kind == Placement::Kind::kFirst);
  CHECK(emb.placement.layer == -1);
  CHECK(emb.placement.stages.empty());

  const auto& fin = p.tensors[1];
  CHECK(fin.name == "final_layernorm.weight");
  CHECK(fin.dtype == DType::BF16);
  CHECK(fin.shape == Shape{1024});
  CHECK_FALSE(fin.tp_dim.has_value());
  CHECK(fin.parts == 1);
  CHECK(fin.pad_to == 0);
  CHECK(fin.placement.kind == Placement::Kind::kLast);
  CHECK(fin.placement.stages.empty());

  const auto& ln = p.tensors[2];
  CHECK(ln.name == "layers.0.input_layernorm.weight");
  CHECK(ln.dtype == DType::BF16);
  CHECK(ln.shape == Shape{1024});
  CHECK_FALSE(ln.tp_dim.has_value());
  CHECK(ln.parts == 1);
  CHECK(ln.pad_to == 0);
  CHECK(ln.placement.kind == Placement::Kind::kLayer);
  CHECK(ln.placement.layer == 0);

  const auto& mlp = p.tensors[3];
  CHECK(mlp.name == "layers.0.mlp.dense_h_to_4h.weight");
  CHECK(mlp.dtype == DType::BF16);
  CHECK(mlp.shape == Shape{8192, 1024});
  CHECK(mlp.tp_dim == std::optional<int>(0));
  CHECK(mlp.parts == 2);
  CHECK(mlp.pad_to == 0);
  CHECK(mlp.placement.kind == Placement::Kind::kLayer);
  CHECK(mlp.placement.layer == 0);

  const auto& dense = p.tensors[4];
  CHECK(dense.name == "layers.0.self_attention.dense.weight");
  CHECK(dense.dtype == DType::BF16);
  CHECK(dense.shape == Shape{1024, 1024});
  CHECK(dense.tp_dim == std::optional<int>(1));
  CHECK(dense.parts == 1);
  CHECK(dense.pad_to == 0);
  CHECK(dense.placement.kind == Placement::Kind::kLayer);
  CHECK(dense.placement.layer == 0);

  const auto& qkv = p.tensors[5];
  CHECK(qkv.name == "layers.0.self_attention.query_key_value.weight");
  CHECK(qkv.dtype == DType::BF16);
  CHECK(qkv.shape == Shape{3072, 1024});
  CHECK(qkv.tp_dim == std::optional<int>(0));
  CHECK(qkv.parts == 1);
  CHECK(qkv.pad_to == 0);
  CHECK(qkv.placement.kind == Placement::Kind::kLayer);
  CHECK(qkv.placement.layer == 0);

  CHECK(p.find("final_layernorm.weight") == &p.tensors[1]);
  CHECK(p.find("layers.0.self_attention.query_key_value.weight") == &p.tensors[5]);
  CHECK(p.find("layers.0") == nullptr);
  CHECK(p.find("zzz") == nullptr);
}

TEST_CASE("parse_ptc_json reads every dtype name, stage list, 'all' and an absent num_layers", "[model]") {
  const std::string text = R"({"parallelism": {"dp": 3, "tp": 1, "pp": 4}, "tensors": {
    "a": {"dtype": "F64", "shape": []}, "b": {"dtype": "F32", "shape": [0]},
    "c": {"dtype": "F16", "shape": [1]}, "d": {"dtype": "BF16", "shape": [2]},
    "e": {"dtype": "I64", "shape": [3]}, "f": {"dtype": "I32", "shape": [4]},
    "g": {"dtype": "I16", "shape": [5]}, "h": {"dtype": "I8", "shape": [6]},
    "i": {"dtype": "U8", "shape": [7]}, "j": {"dtype": "BOOL", "shape": [8]},
    "k": {"dtype": "F8_E4M3", "shape": [9], "stage": [3, 1]},
    "l": {"dtype": "F8_E5M2", "shape": [1, 2, 3], "stage": "all"},
    "m": {"dtype": "U16", "shape": [2]}, "n": {"dtype": "U32", "shape": [2]}, "o": {"dtype": "U64", "shape": [2]}}})";
  auto r = parse_ptc_json(text, kFile);
  REQUIRE(r.is_ok());
  CHECK(r->parallelism == Parallelism{1, 4, 3});
  CHECK(r->num_layers == 0);
  REQUIRE(r->tensors.size() == 15);
  const DType want[] = {DType::F64,     DType::F32,     DType::F16, DType::BF16, DType::I64,
                        DType::I32,     DType::I16,     DType::I8,  DType::U8,   DType::BOOL,
                        DType::F8_E4M3, DType::F8_E5M2, DType::U16, DType::U32,  DType::U64};
  for (size_t i = 0; i < 15; ++i) {
    CHECK(r->tensors[i].name == std::string(1, static_cast<char>('a' + i)));
    CHECK(r->tensors[i].dtype == want[i]);
  }
  CHECK(r->tensors[0].shape == Shape{});
  CHECK(r->tensors[1].shape == Shape{0});
  CHECK(r->tensors[10].placement.kind == Placement::Kind::kList);
  CHECK(r->tensors[10].placement.stages == std::vector<int>{1, 3});  // sorted
  CHECK(r->tensors[11].placement.kind == Placement::Kind::kAll);
  CHECK(r->tensors[11].shape == Shape{1, 2, 3});
}

TEST_CASE("parse_ptc_json refuses unknown keys at every level", "[model]") {
  expect_invalid(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "tensors": {"a": {"dtype": "F32", "shape": [1]}},
                     "layers": 2})",
                 {"unknown key 'layers'"});
  expect_invalid(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1, "ep": 2},
                     "tensors": {"a": {"dtype": "F32", "shape": [1]}}})",
                 {"parallelism", "unknown key 'ep'"});
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "tp_dims": 0})", "unknown key 'tp_dims'");
}

TEST_CASE("parse_ptc_json refuses missing required members", "[model]") {
  expect_invalid(R"({"tensors": {"a": {"dtype": "F32", "shape": [1]}}})", {"missing 'parallelism'"});
  expect_invalid(R"({"parallelism": {"tp": 1, "pp": 1}, "tensors": {"a": {"dtype": "F32", "shape": [1]}}})",
                 {"parallelism", "missing 'dp'"});
  expect_invalid(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}})", {"'tensors' must be a non-empty object"});
  expect_invalid(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "tensors": {}})",
                 {"'tensors' must be a non-empty object"});
  expect_tensor_invalid("w", R"({"shape": [4]})", "missing 'dtype'");
  expect_tensor_invalid("w", R"({"dtype": "F32"})", "'shape' must be a list of integers");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": 4})", "'shape' must be a list of integers");
}

TEST_CASE("parse_ptc_json refuses bad values in parallelism and num_layers", "[model]") {
  expect_invalid(R"({"parallelism": {"tp": 0, "pp": 1, "dp": 1}, "tensors": {"a": {"dtype": "F32", "shape": [1]}}})",
                 {"parallelism.tp", "0 is outside [1, "});
  expect_invalid(R"({"parallelism": {"tp": 1, "pp": "2", "dp": 1}, "tensors": {"a": {"dtype": "F32", "shape": [1]}}})",
                 {"parallelism.pp", "expected an integer"});
  expect_invalid(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": -1,
                     "tensors": {"a": {"dtype": "F32", "shape": [1]}}})",
                 {"num_layers", "-1 is outside"});
}

TEST_CASE("parse_ptc_json refuses an unknown dtype and names it", "[model]") {
  expect_tensor_invalid("w", R"({"dtype": "F31", "shape": [4]})", "F31");
  expect_tensor_invalid("w", R"({"dtype": "bf16", "shape": [4]})", "bf16");
  expect_tensor_invalid("w", R"({"dtype": 16, "shape": [4]})", "expected a string");
}

TEST_CASE("parse_ptc_json refuses non-integer and negative dimensions", "[model]") {
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4, 2.5]})", "shape[1]: expected an integer");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": ["4"]})", "shape[0]: expected an integer");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [null]})", "shape[0]: expected an integer");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [3, -1]})", "shape[1]: -1 is outside");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]})",
                        "more than 16 dimensions");
}

TEST_CASE("parse_ptc_json refuses a tp_dim outside the shape", "[model]") {
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4, 4], "tp_dim": 2})", "tp_dim: 2 is outside [0, 1]");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4, 4], "tp_dim": -1})", "tp_dim: -1 is outside [0, 1]");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [], "tp_dim": 0})", "a scalar cannot have a tp_dim");
}

TEST_CASE("parse_ptc_json refuses parts without tp_dim or not dividing the dimension", "[model]") {
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [8, 4], "parts": 2})", "'parts' needs a 'tp_dim'");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [10, 4], "tp_dim": 0, "parts": 3})",
                        "shape[0] = 10 is not divisible into 3 parts");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4, 10], "tp_dim": 1, "parts": 4})",
                        "shape[1] = 10 is not divisible into 4 parts");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "parts": 0})", "parts: 0 is outside");
}

TEST_CASE("parse_ptc_json refuses pad_to without tp_dim or with parts", "[model]") {
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [1000, 4], "pad_to": 128})", "'pad_to' needs a 'tp_dim'");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [1024, 4], "tp_dim": 0, "parts": 2, "pad_to": 128})",
                        "'pad_to' and 'parts' cannot be combined");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [1000, 4], "tp_dim": 0, "pad_to": 0})",
                        "pad_to: 0 is outside");
}

TEST_CASE("parse_ptc_json refuses heads without tp_dim, with pad_to, or not dividing each part", "[model]") {
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [8, 4], "heads": 2})", "'heads' needs a 'tp_dim'");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [1024, 4], "tp_dim": 0, "pad_to": 128, "heads": 2})",
                        "'heads' and 'pad_to' cannot be combined");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [10, 4], "tp_dim": 0, "heads": 4})",
                        "shape[0] (10) is not 4 equal heads");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [12, 4], "tp_dim": 0, "parts": 3, "heads": 3})",
                        "each part of shape[0] (4) is not 3 equal heads");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "heads": 0})", "heads: 0 is outside");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [8, 4], "tp_dim": 0, "heads": "2"})", "heads");
}

TEST_CASE("parse_ptc_json refuses bad placements", "[model]") {
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "layer": 0, "stage": "first"})",
                        "give either 'layer' or 'stage', not both");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "layer": 4})", "layer: 4 is outside [0, 3]");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "layer": -1})", "layer: -1 is outside [0, 3]");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "stage": "middle"})", "stage 'middle'");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "stage": "First"})", "stage 'First'");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "stage": []})", "non-empty list of indices");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "stage": 1})", "non-empty list of indices");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "stage": [0, 1, 0]})", "stage list repeats an index");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "stage": [0, -1]})", "stage[1]: -1 is outside");
  expect_tensor_invalid("w", R"({"dtype": "F32", "shape": [4], "stage": ["last"]})", "stage[0]: expected an integer");
  // A layer needs layers.
  expect_invalid(
      R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "tensors": {"w": {"dtype": "F32", "shape": [4], "layer": 0}}})",
      {"tensor 'w'", "'layer' given but num_layers is 0"});
}

TEST_CASE("parse_ptc_json refuses bad tensor names", "[model]") {
  const std::string body = R"({"dtype": "F32", "shape": [4]})";
  expect_invalid(doc_with("", body), {"empty tensor name"});
  expect_invalid(doc_with("a//b", body), {"tensor name 'a//b'", "empty path component"});
  expect_invalid(doc_with("/a", body), {"tensor name '/a'", "empty path component"});
  expect_invalid(doc_with("a/", body), {"tensor name 'a/'", "empty path component"});
  expect_invalid(doc_with(".", body), {"tensor name '.'", "'.' path component"});
  expect_invalid(doc_with("..", body), {"tensor name '..'", "'..' path component"});
  expect_invalid(doc_with("a/./b", body), {"tensor name 'a/./b'", "'.' path component"});
  expect_invalid(doc_with("a/../b", body), {"tensor name 'a/../b'", "'..' path component"});
  const std::string long_comp(251, 'x');
  expect_invalid(doc_with("a/" + long_comp, body), {"path component longer than 250 bytes"});
  // A NUL escaped inside the JSON string reaches the name check.
  expect_invalid(doc_with("a\\u0000b", body), {"contains a NUL byte"});

  // Dots inside a component and a 250-byte component are fine.
  auto ok = parse_ptc_json(doc_with("a/.b/..c/" + std::string(250, 'y'), body), kFile);
  REQUIRE(ok.is_ok());
  CHECK(ok->tensors[0].name == "a/.b/..c/" + std::string(250, 'y'));
}

TEST_CASE("validate_tensor_name limits the whole name to 4096 bytes", "[model]") {
  std::string name;
  while (name.size() < 4096) name += std::string(99, 'n') + "/";
  name.resize(4096);  // ends in a component, no trailing slash
  REQUIRE(name.back() != '/');
  CHECK(validate_tensor_name(name).is_ok());
  const Status s = validate_tensor_name(name + "m");
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("longer than 4096 bytes"));
  CHECK(validate_tensor_name("layers.0.w").is_ok());
  CHECK(validate_tensor_name("a/b/c").is_ok());
}

TEST_CASE("validate_tensor_names refuses safetensors' key and a name shown where another needs a folder", "[model]") {
  const auto specs = [](std::initializer_list<const char*> names) {
    std::vector<TensorSpec> out;
    for (const char* n : names) {
      TensorSpec t;
      t.name = n;
      out.push_back(std::move(t));
    }
    return out;  // given sorted, as Ptc keeps them
  };
  CHECK(validate_tensor_names(specs({"a", "a.npx/b", "a.npy", "a.npyb", "b/a.npy"})).is_ok());
  const Status clash = validate_tensor_names(specs({"a", "a.npy/b", "b"}));
  CHECK(clash.code() == Code::kInvalidArgument);
  CHECK(clash.message() ==
        "tensor names 'a' and 'a.npy/b' clash: 'a' is shown as the file a.npy, which 'a.npy/b' needs as a folder");
  CHECK_THAT(validate_tensor_names(specs({"x/a", "x/a.npy/c/d"})).message(),
             Catch::StartsWith("tensor names 'x/a' and 'x/a.npy/c/d' clash"));
  CHECK(validate_tensor_names(specs({"__metadata__", "w"})).message() ==
        "tensor name '__metadata__' is reserved by safetensors (the header's key)");
}

TEST_CASE("parse_ptc_json refuses a NUL byte in the text and bad JSON", "[model]") {
  std::string text = kDesignExample;
  text.push_back('\0');
  text += "garbage";
  expect_invalid(text, {"contains a NUL byte"});
  std::string inner = kDesignExample;
  inner[inner.find("BF16")] = '\0';
  expect_invalid(inner, {"contains a NUL byte"});
  expect_invalid("{\"parallelism\": ", {"not valid JSON"});
  expect_invalid("[]", {"expected a JSON object"});
}

// Every field of a tensor, every placement, and names that need escaping in JSON.
const std::string kEveryField = R"({"parallelism": {"tp": 2, "pp": 3, "dp": 5}, "num_layers": 6, "tensors": {
    "emb": {"dtype": "BF16", "shape": [1000, 16], "tp_dim": 0, "pad_to": 64},
    "fin": {"dtype": "F32", "shape": [16], "stage": "last"},
    "every": {"dtype": "I64", "shape": [], "stage": "all"},
    "some": {"dtype": "U8", "shape": [3, 4], "stage": [2, 0]},
    "layers.5/mlp": {"dtype": "F16", "shape": [8, 16], "tp_dim": 0, "parts": 2, "layer": 5},
    "layers.2/dense": {"dtype": "F8_E5M2", "shape": [16, 8], "tp_dim": 1, "layer": 2, "heads": 4},
    "layers.1/qkv": {"dtype": "F16", "shape": [12, 4], "tp_dim": 0, "parts": 3, "heads": 2, "layer": 1},
    "q\"uote\\d": {"dtype": "F32", "shape": [123456789], "stage": "first"},
    "first": {"dtype": "BOOL", "shape": [7], "stage": "first"}}})";

TEST_CASE("ptc_to_json round-trips every field", "[model]") {
  const std::string& text = kEveryField;
  auto a = parse_ptc_json(text, kFile);
  REQUIRE(a.is_ok());
  CHECK(a->find("layers.2/dense")->heads == 4);
  CHECK(a->find("layers.1/qkv")->heads == 2);
  CHECK(a->find("emb")->heads == 0);
  CHECK_THAT(ptc_to_json(*a), Catch::Contains(R"("heads": 4)"));
  const std::string canon = ptc_to_json(*a);
  auto b = parse_ptc_json(canon, "canonical");
  REQUIRE(b.is_ok());
  check_same(*a, *b);
  CHECK(ptc_to_json(*b) == canon);

  auto d = parse_ptc_json(kDesignExample, kFile);
  REQUIRE(d.is_ok());
  auto d2 = parse_ptc_json(ptc_to_json(*d), "canonical");
  REQUIRE(d2.is_ok());
  check_same(*d, *d2);
}

TEST_CASE("ptc_json_text writes what ptc_json's DOM dumps, byte for byte", "[model]") {
  for (const std::string& doc : {kEveryField, kDesignExample}) {
    auto a = parse_ptc_json(doc, kFile);
    REQUIRE(a.is_ok());
    CHECK(ptc_json_text(*a) == ptc_json(*a).dump());
    auto b = parse_ptc_json(ptc_json_text(*a), "text");
    REQUIRE(b.is_ok());
    check_same(*a, *b);
  }
}

TEST_CASE("hf_config is kept as compact sorted JSON, written by both writers and refused unless an object", "[model]") {
  const std::string doc = R"({"hf_config": {"vocab_size": 100, "architectures": ["LlamaForCausalLM"],
                                             "rms_norm_eps": 1e-05, "rope_scaling": null, "name": "l\u00e9"},
                              "num_layers": 0, "parallelism": {"tp": 1, "pp": 1, "dp": 1},
                              "tensors": {"w": {"dtype": "F32", "shape": [4]}}})";
  auto a = parse_ptc_json(doc, kFile);
  REQUIRE(a.is_ok());
  CHECK(a->hf_config ==
        "{\"architectures\":[\"LlamaForCausalLM\"],\"name\":\"l\u00e9\",\"rms_norm_eps\":1e-05,\"rope_scaling\":null,"
        "\"vocab_size\":100}");
  CHECK(ptc_json_text(*a) == ptc_json(*a).dump());
  auto b = parse_ptc_json(ptc_to_json(*a), "canonical");
  REQUIRE(b.is_ok());
  CHECK(b->hf_config == a->hf_config);
  for (const char* bad : {"[1]", "\"config.json\"", "null", "3"}) {
    auto r = parse_ptc_json(
        std::string(R"({"hf_config": )") + bad +
            R"(, "parallelism": {"tp": 1, "pp": 1, "dp": 1}, "tensors": {"w": {"dtype": "F32", "shape": [4]}}})",
        kFile);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message() == std::string(kFile) + ": 'hf_config' must be an object (a config.json)");
  }
  auto huge = parse_ptc_json(
      R"({"hf_config": {"n": ")" + std::string(kMaxHfConfig, 'x') +
          R"("}, "parallelism": {"tp": 1, "pp": 1, "dp": 1}, "tensors": {"w": {"dtype": "F32", "shape": [4]}}})",
      kFile);
  REQUIRE_FALSE(huge.is_ok());
  CHECK(huge.status().message() ==
        kFile + ": 'hf_config' is " + std::to_string(kMaxHfConfig + 8) + " bytes of JSON; at most 262144");
  auto none = parse_ptc_json(kDesignExample, kFile);
  REQUIRE(none.is_ok());
  CHECK(none->hf_config.empty());
  CHECK(ptc_json(*none).count("hf_config") == 0);
}

TEST_CASE("ptc_to_json writes sorted keys, two-space indent and a trailing newline", "[model]") {
  auto p = parse_ptc_json(R"({"tensors": {"w": {"shape": [8, 2], "tp_dim": 0, "dtype": "F32", "layer": 1},
                                          "b": {"dtype": "F16", "shape": [2]}},
                              "num_layers": 2, "parallelism": {"tp": 2, "pp": 1, "dp": 1}})",
                          kFile);
  REQUIRE(p.is_ok());
  CHECK(ptc_to_json(*p) ==
        "{\n"
        "  \"num_layers\": 2,\n"
        "  \"parallelism\": {\n"
        "    \"dp\": 1,\n"
        "    \"pp\": 1,\n"
        "    \"tp\": 2\n"
        "  },\n"
        "  \"tensors\": {\n"
        "    \"b\": {\n"
        "      \"dtype\": \"F16\",\n"
        "      \"shape\": [\n"
        "        2\n"
        "      ],\n"
        "      \"stage\": \"first\"\n"
        "    },\n"
        "    \"w\": {\n"
        "      \"dtype\": \"F32\",\n"
        "      \"layer\": 1,\n"
        "      \"shape\": [\n"
        "        8,\n"
        "        2\n"
        "      ],\n"
        "      \"tp_dim\": 0\n"
        "    }\n"
        "  }\n"
        "}\n");
}

TEST_CASE("parse_parallelism reads tp, pp and dp in any order", "[model]") {
  auto a = parse_parallelism("tp=4,pp=2,dp=1");
  REQUIRE(a.is_ok());
  CHECK(a->tp == 4);
  CHECK(a->pp == 2);
  CHECK(a->dp == 1);
  CHECK(a->world() == 8);
  auto b = parse_parallelism("dp=3,tp=8,pp=16");
  REQUIRE(b.is_ok());
  CHECK(*b == Parallelism{8, 16, 3});
  CHECK(b->to_string() == "tp=8,pp=16,dp=3");
  auto c = parse_parallelism(b->to_string());
  REQUIRE(c.is_ok());
  CHECK(*c == *b);
  auto big = parse_parallelism("pp=1,dp=999999,tp=1");
  REQUIRE(big.is_ok());
  CHECK(big->dp == 999999);
}

TEST_CASE("parse_parallelism refuses missing, repeated, unknown, zero and non-numeric degrees", "[model]") {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"tp=4,pp=2", "tp, pp and dp are all required"},
      {"tp=4", "tp, pp and dp are all required"},
      {"", "expected key=value items"},
      {"tp=4,pp=2,dp=1,", "expected key=value items"},
      {"tp=4,,pp=2,dp=1", "expected key=value items"},
      {"tp4,pp=2,dp=1", "expected key=value items"},
      {"tp=4,pp=2,dp=1,tp=4", "'tp' given twice"},
      {"tp=4,pp=2,pp=2", "'pp' given twice"},
      {"tp=4,pp=2,ep=1", "unknown key 'ep'"},
      {"TP=4,pp=2,dp=1", "unknown key 'TP'"},
      {" tp=4,pp=2,dp=1", "unknown key ' tp'"},
      {"tp=0,pp=2,dp=1", "tp must be at least 1"},
      {"tp=4,pp=2,dp=000", "dp must be at least 1"},
      {"tp=x,pp=2,dp=1", "tp must be a positive integer"},
      {"tp=4,pp=,dp=1", "pp must be a positive integer"},
      {"tp=-1,pp=2,dp=1", "tp must be a positive integer"},
      {"tp=+1,pp=2,dp=1", "tp must be a positive integer"},
      {"tp=1.5,pp=2,dp=1", "tp must be a positive integer"},
      {"tp=4 ,pp=2,dp=1", "tp must be a positive integer"},
      {"tp=1234567,pp=2,dp=1", "tp must be a positive integer"},
  };
  for (const auto& c : cases) {
    INFO("text: '" << c.text << "'");
    auto r = parse_parallelism(c.text);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(std::string("parallelism '") + c.text + "'"));
    CHECK_THAT(r.status().message(), Catch::Contains(c.needle));
  }
}

TEST_CASE("validate_id accepts [A-Za-z0-9_.-]+ up to 128 bytes not starting with '.'", "[model]") {
  CHECK(validate_id("job", "gpt-3_B.v1").is_ok());
  CHECK(validate_id("step", "100").is_ok());
  CHECK(validate_id("step", "a..b").is_ok());
  CHECK(validate_id("job", std::string(128, 'j')).is_ok());

  struct Case {
    std::string id;
    const char* needle;
  };
  const Case cases[] = {
      {"", "empty job name"},
      {".hidden", "must not start with '.'"},
      {".", "must not start with '.'"},
      {"..", "must not start with '.'"},
      {"a/b", "may hold only letters"},
      {"a b", "may hold only letters"},
      {"a\\b", "may hold only letters"},
      {std::string("a\0b", 3), "may hold only letters"},
      {"caf\xc3\xa9", "may hold only letters"},
      {std::string(129, 'j'), "longer than 128 bytes"},
  };
  for (const auto& c : cases) {
    INFO("id: '" << c.id << "'");
    const Status s = validate_id("job", c.id);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains(c.needle));
  }
  CHECK_THAT(validate_id("step", "x/y").message(), Catch::Contains("step name 'x/y'"));
}
