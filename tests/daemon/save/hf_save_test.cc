// The pure rules of a stock save_pretrained into the mount (daemon/save/hf_save.h): its names,
// when it is complete, its template, and the plan that copies it into the unsharded layout.
#include "daemon/save/hf_save.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

using namespace ptcfs;

TEST_CASE("save_pretrained's names: its JSON files, its safetensors files and their temporaries", "[hf_save]") {
  for (const char* n : {"config.json", "generation_config.json", "model.safetensors.index.json", "model.safetensors",
                        "model-00001-of-00006.safetensors", ".tmpW0mCob"})
    CHECK(is_hf_save_file(n));
  for (const char* n : {"ptc.json", "tokenizer.json", "pytorch_model.bin", "model-1-of-2.safetensors",
                        "model-0000a-of-00002.safetensors", "sub/config.json", ".tmp", "tp0-pp0.safetensors"})
    CHECK_FALSE(is_hf_save_file(n));
  CHECK(is_hf_data_file(".tmpabc"));
  CHECK(is_hf_data_file("model.safetensors"));
  CHECK_FALSE(is_hf_data_file("config.json"));
  CHECK(is_hf_rename(".tmpabc", "model-00002-of-00006.safetensors"));
  CHECK_FALSE(is_hf_rename(".tmpabc", "config.json"));
  CHECK_FALSE(is_hf_rename("model.safetensors", "model-00001-of-00001.safetensors"));
}

TEST_CASE("a save is complete once config.json and every file the index names are closed", "[hf_save]") {
  using Files = std::map<std::string, bool>;
  const std::string w = "j/1";
  CHECK(*hf_save_complete({{"config.json", true}, {"model.safetensors", true}}, std::nullopt, w));
  CHECK_FALSE(*hf_save_complete({{"config.json", true}, {"model.safetensors", false}}, std::nullopt, w));
  CHECK_FALSE(*hf_save_complete({{"model.safetensors", true}}, std::nullopt, w));  // its config to come
  CHECK_FALSE(
      *hf_save_complete({{"config.json", true}, {"model.safetensors", true}, {".tmpx", true}}, std::nullopt, w));
  // Sharded: nothing until the index, which comes last.
  Files sharded = {{"config.json", true},
                   {"generation_config.json", true},
                   {"model-00001-of-00002.safetensors", true},
                   {"model-00002-of-00002.safetensors", true}};
  CHECK_FALSE(*hf_save_complete(sharded, std::nullopt, w));
  const std::string index =
      R"({"metadata": {"total_size": 8}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  sharded[kHfIndexFile] = true;
  CHECK(*hf_save_complete(sharded, index, w));
  sharded.erase("model-00002-of-00002.safetensors");
  CHECK_FALSE(*hf_save_complete(sharded, index, w));
  auto bad = hf_save_complete({{"config.json", true}, {kHfIndexFile, true}}, std::string("[1]"), w);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message() == "j/1/model.safetensors.index.json: not an object with a weight_map");
}

TEST_CASE("the template comes from the config's model_type", "[hf_save]") {
  CHECK(*hf_template_for(R"({"model_type": "llama"})", "j/1") == "llama");
  CHECK(*hf_template_for(R"({"model_type": "qwen2"})", "j/1") == "llama");
  CHECK(*hf_template_for(R"({"model_type": "gpt_neox"})", "j/1") == "neox");
  auto none = hf_template_for(R"({"architectures": ["X"]})", "j/1");
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().message() ==
        "j/1/config.json: no model_type, so no template gives its tensors their partitioning");
  auto other = hf_template_for(R"({"model_type": "t5"})", "j/1");
  REQUIRE_FALSE(other.is_ok());
  CHECK(other.status().message().find("model_type 't5' has no shipped template") != std::string::npos);
}

TEST_CASE("the plan copies each tensor from its file and pads the vocabulary with zeros", "[hf_save]") {
  // Two files: the embedding (vocabulary 200 of 4, padded to 256 rows by the llama template) in the
  // first, a norm in the second.
  formats::HfCheckpoint ck;
  auto header = [](std::vector<formats::TensorDecl> decls) {
    auto l = formats::layout_safetensors(decls, {{"format", "pt"}});
    REQUIRE(l.is_ok());
    auto h = formats::parse_safetensors(l->header, l->file_size(), "f");
    REQUIRE(h.is_ok());
    return *h;
  };
  ck.files.push_back(
      {"model-00001-of-00002.safetensors", header({{"model.embed_tokens.weight", ptc::DType::BF16, {200, 4}}})});
  ck.files.push_back({"model-00002-of-00002.safetensors", header({{"model.norm.weight", ptc::DType::F32, {4}}})});
  ck.tensors.push_back({{"model.embed_tokens.weight", ptc::DType::BF16, {200, 4}}, 0, 0});
  ck.tensors.push_back({{"model.norm.weight", ptc::DType::F32, {4}}, 1, 0});
  const std::string config = R"({"hidden_size":4,"model_type":"llama","vocab_size":200})";
  auto parsed = formats::parse_hf_config(config, "c");
  REQUIRE(parsed.is_ok());
  ck.config = *parsed;
  auto t = formats::builtin_template("llama");
  REQUIRE(t.is_ok());
  auto save = plan_hf_save(ck, *t, "j/1");
  REQUIRE(save.is_ok());
  CHECK(save->ptc.hf_config == config);
  CHECK(save->ptc.parallelism == ptc::Parallelism{});
  CHECK(save->bytes == 200 * 4 * 2 + 4 * 4);
  REQUIRE(save->files.size() == 2);
  const auto& emb = save->files[0];
  CHECK(emb.name == "model.embed_tokens.weight");
  CHECK(emb.shape == ptc::Shape{256, 4});
  const uint64_t start0 = ck.files[0].header.data_start;
  REQUIRE(emb.copies.size() == 1);
  CHECK(emb.copies[0].file == "model-00001-of-00002.safetensors");
  CHECK(emb.copies[0].src == start0);
  CHECK(emb.copies[0].dst == 0);
  CHECK(emb.copies[0].len == 1600);
  REQUIRE(emb.zeros.size() == 1);
  CHECK(emb.zeros[0].dst == 1600);
  CHECK(emb.zeros[0].len == 56 * 4 * 2);
  const auto& norm = save->files[1];
  REQUIRE(norm.copies.size() == 1);
  CHECK(norm.copies[0].file == "model-00002-of-00002.safetensors");
  CHECK(norm.copies[0].src == ck.files[1].header.data_start);
  CHECK(norm.copies[0].len == 16);
  CHECK(norm.zeros.empty());

  ck.config.reset();
  auto no_config = plan_hf_save(ck, *t, "j/1");
  REQUIRE_FALSE(no_config.is_ok());
  CHECK(no_config.status().message() == "j/1: no config.json");
}
