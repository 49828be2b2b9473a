#include "fs/dataset_views.h"

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ptc/formats/mmidx.h"
#include "tests/fs/fake_dataset.h"

using namespace ptcfs;
using namespace ptcfs::fs;
using namespace ptcfs::fs::testing;

namespace {

// Records of different lengths, by sample id.
const std::vector<std::string> kRecords = {"{\"t\":\"zero\"}\n", "{\"t\":\"one\"}\n", "{\"t\":\"two!\"}\n",
                                           "{\"t\":\"three\"}\n", "{\"t\":\"four\"}\n"};

// 5 samples, global batch 2 (one dropped per epoch), 2 DP ranks, one batch already consumed.
std::shared_ptr<const DatasetContent> dataset(ptc::DatasetFormat format, uint64_t consumed,
                                              const std::vector<std::string>& records = kRecords) {
  ptc::DatasetSpec spec;
  spec.format = format;
  spec.seed = 9;
  spec.num_samples = 5;
  spec.global_batch = 2;
  ptc::DatasetPosition pos;
  pos.dp = 2;
  pos.epoch = 3;
  pos.consumed = consumed;
  return std::make_shared<FakeDataset>(11, spec, pos, records, std::vector<uint32_t>{4, 2, 0, 3, 1}, 4);
}

std::map<std::string, std::shared_ptr<const View>> files_of(const std::shared_ptr<const DatasetContent>& c) {
  std::map<std::string, std::shared_ptr<const View>> out;
  for (auto& [name, v] : dataset_views(c)) REQUIRE(out.emplace(name, v).second);
  return out;
}

std::string read(const View& v, uint64_t off, uint64_t len) {
  ReadBuffer b;
  REQUIRE(v.read(off, len, b).is_ok());
  REQUIRE(b.size() == len);
  std::string out(len, '?');
  REQUIRE(b.copy_to(reinterpret_cast<std::byte*>(out.data())).is_ok());
  return out;
}

std::string whole(const View& v) { return read(v, 0, v.size()); }

}  // namespace

TEST_CASE("state.json states the dataset's spec, position and version") {
  auto files = files_of(dataset(ptc::DatasetFormat::kJsonl, 2));
  CHECK(whole(*files.at("state.json")) ==
        "{\n"
        "  \"batch_offset\": 0,\n"
        "  \"consumed\": 2,\n"
        "  \"dp\": 2,\n"
        "  \"dropped\": 1,\n"
        "  \"epoch\": 3,\n"
        "  \"format\": \"jsonl\",\n"
        "  \"global_batch\": 2,\n"
        "  \"num_samples\": 5,\n"
        "  \"samples_per_epoch\": 4,\n"
        "  \"seed\": 9,\n"
        "  \"version\": 11\n"
        "}\n");
}

TEST_CASE("a JSONL rank file is the records its rank reads, from the consumed position to the end of the epoch") {
  // Order 4 2 0 3 (1 dropped); batches (4, 2) and (0, 3); rank d takes the d-th sample of each.
  SECTION("from the start") {
    auto files = files_of(dataset(ptc::DatasetFormat::kJsonl, 0));
    CHECK(files.size() == 3);
    CHECK(whole(*files.at("dp0.jsonl")) == kRecords[4] + kRecords[0]);
    CHECK(whole(*files.at("dp1.jsonl")) == kRecords[2] + kRecords[3]);
    CHECK(files.at("dp0.jsonl")->version() == 11);
  }
  SECTION("after one batch") {
    auto files = files_of(dataset(ptc::DatasetFormat::kJsonl, 2));
    CHECK(whole(*files.at("dp0.jsonl")) == kRecords[0]);
    CHECK(whole(*files.at("dp1.jsonl")) == kRecords[3]);
  }
  SECTION("read at every offset split, across records") {
    auto files = files_of(dataset(ptc::DatasetFormat::kJsonl, 0));
    const View& v = *files.at("dp1.jsonl");
    const std::string expected = kRecords[2] + kRecords[3];
    for (uint64_t s = 0; s <= v.size(); ++s) {
      INFO("split at " << s);
      CHECK(read(v, 0, s) + read(v, s, v.size() - s) == expected);
      for (uint64_t e = s; e <= v.size(); ++e) REQUIRE(read(v, s, e - s) == expected.substr(s, e - s));
    }
  }
}

TEST_CASE("a Megatron rank file is a .bin of its sequences and an .idx naming each one, one document each") {
  // Sequences of int32 elements (dtype code 4): 2, 1, 3 and 2 elements.
  const std::vector<std::string> seqs = {std::string(8, 'a'), std::string(4, 'b'), std::string(12, 'c'),
                                         std::string(8, 'd'), std::string(4, 'e')};
  auto files = files_of(dataset(ptc::DatasetFormat::kMegatron, 0, seqs));
  CHECK(files.size() == 5);  // state.json, dp{0,1}.{bin,idx}
  CHECK(whole(*files.at("dp0.bin")) == seqs[4] + seqs[0]);
  CHECK(whole(*files.at("dp1.bin")) == seqs[2] + seqs[3]);
  CHECK(whole(*files.at("dp0.idx")) == formats::render_mmidx(4, {4, 8}));
  CHECK(whole(*files.at("dp1.idx")) == formats::render_mmidx(4, {12, 8}));
  auto idx = formats::parse_mmidx(whole(*files.at("dp1.idx")), files.at("dp1.bin")->size(), "dp1.idx");
  REQUIRE(idx.is_ok());
  CHECK(idx->dtype_code == 4);
  CHECK(idx->offsets == std::vector<uint64_t>{0, 12});
  CHECK(idx->bytes == std::vector<uint64_t>{12, 8});
  CHECK(idx->documents == 2);
}

TEST_CASE("a rank file at the end of its epoch is empty") {
  auto files = files_of(dataset(ptc::DatasetFormat::kJsonl, 4));
  CHECK(files.at("dp0.jsonl")->size() == 0);
  CHECK(read(*files.at("dp1.jsonl"), 0, 0).empty());
}
