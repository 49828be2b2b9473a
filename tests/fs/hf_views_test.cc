// The Hugging Face view (fs/hf_views.h) of the test step (tests/fs/fake_step.h): its files, split
// by size as Hugging Face splits, each tensor whole and unpadded under its name; the config and
// the index as transformers reads them; no folder for a step without a config.
#include "fs/hf_views.h"

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ptc/formats/safetensors.h"
#include "tests/fs/fake_step.h"

using namespace ptcfs;
using namespace ptcfs::fs;
using namespace ptcfs::fs::testing;

namespace {

std::map<std::string, std::string> files_of(const std::shared_ptr<const StepContent>& c, uint64_t shard_bytes) {
  std::map<std::string, std::string> out;
  for (auto& [name, v] : hf_views(c, shard_bytes)) out.emplace(name, read_all(*v));
  return out;
}

constexpr const char* kConfig = R"({"architectures":["TestForCausalLM"],"hidden_size":3,"rms_norm_eps":1e-06})";

}  // namespace

TEST_CASE("the hf view splits by size in name order and holds every tensor whole, unpadded") {
  auto c = std::make_shared<FakeStep>(4, 1700000000, kConfig);
  // 12, 12, 8, 32 and 32 bytes in name order, at most 20 a file: [emb], [final_norm, head/bias],
  // [qkv], [dense].
  const auto files = files_of(c, 20);
  const std::vector<std::vector<size_t>> groups = {{kEmb}, {kFinalNorm, kHeadBias}, {kQkv}, {kDense}};
  const char* names[] = {"emb.weight", "final_norm", "head/bias", "layers.0.qkv", "layers.1.dense"};
  REQUIRE(files.size() == 2 + groups.size());
  nlohmann::json want_map = nlohmann::json::object();
  for (size_t k = 0; k < groups.size(); ++k) {
    const std::string name = "model-0000" + std::to_string(k + 1) + "-of-00004.safetensors";
    INFO(name);
    REQUIRE(files.count(name));
    const std::string& bytes = files.at(name);
    auto h = formats::parse_safetensors(bytes, bytes.size(), name);
    REQUIRE(h.is_ok());
    CHECK(h->metadata == std::map<std::string, std::string>{{"format", "pt"}});
    REQUIRE(h->entries.size() == groups[k].size());
    for (size_t j = 0; j < groups[k].size(); ++j) {
      const size_t t = groups[k][j];
      const auto& e = h->entries[j];
      CHECK(e.name == names[t]);
      CHECK(bytes.substr(h->data_start + e.begin, e.end - e.begin) == logical(t));
      want_map[names[t]] = name;
    }
    CHECK(h->data_start + h->entries.back().end == bytes.size());
  }
  {  // emb.weight is stored padded to 8 rows; its file holds the 2 rows of the model
    const std::string& first = files.at("model-00001-of-00004.safetensors");
    auto h = formats::parse_safetensors(first, first.size(), "first");
    REQUIRE(h.is_ok());
    CHECK(h->entries.at(0).shape == ptc::Shape{2, 3});
    CHECK(h->entries.at(0).dtype == ptc::DType::I16);
  }
  CHECK(nlohmann::json::parse(files.at("model.safetensors.index.json")) ==
        nlohmann::json{{"metadata", {{"total_size", 96}}}, {"weight_map", want_map}});
  CHECK(files.at("config.json") == nlohmann::json::parse(kConfig).dump(2) + "\n");

  // At the default size, one file.
  const auto one = files_of(c, kDefaultHfShardBytes);
  CHECK(one.count("model-00001-of-00001.safetensors") == 1);
  CHECK(one.size() == 3);
}

TEST_CASE("a step without a config has no hf view, and the view reads the version it was made on") {
  CHECK(hf_views(std::make_shared<FakeStep>(1), kDefaultHfShardBytes).empty());
  auto c = std::make_shared<FakeStep>(7, 1700000000, kConfig);
  for (auto& [name, v] : hf_views(c, kDefaultHfShardBytes)) CHECK(v->version() == 7);
}
