#include "ptc/formats/safetensors.h"

#include <catch2/catch.hpp>

#include <string>

using namespace ptcfs;
using namespace ptcfs::ptc;
using namespace ptcfs::formats;

namespace {

const std::string kFile = "ckpt/tp0-pp0.safetensors";

std::string le64(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out;
}

// A whole file: length prefix, the JSON as given, `data` zero bytes.
std::string file_with(const std::string& json, uint64_t data) {
  return le64(json.size()) + json + std::string(data, '\0');
}

Result<SafetensorsHeader> parse(const std::string& bytes) { return parse_safetensors(bytes, bytes.size(), kFile); }

// Parses `json` followed by `data` bytes and expects a kCorrupt error whose message holds
// the file name and `needle`.
void expect_corrupt(const std::string& json, uint64_t data, const std::string& needle) {
  INFO("header: " << json);
  auto r = parse(file_with(json, data));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kCorrupt);
  CHECK_THAT(r.status().message(), Catch::Contains(kFile));
  CHECK_THAT(r.status().message(), Catch::Contains(needle));
}

const std::string kOneTensor = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

}  // namespace

TEST_CASE("layout_safetensors writes the canonical header of Python's sort_keys writer", "[safetensors]") {
  // Expected bytes from json.dumps(h, separators=(',', ':'), sort_keys=True), padded to 8.
  const std::string expected_json =
      R"({"__metadata__":{"format":"pt","step":"100"},"layers.0.w":{"data_offsets":[64,88],"dtype":"F32",)"
      R"("shape":[2,3]},"model.embed":{"data_offsets":[0,64],"dtype":"BF16","shape":[4,8]},"scalar":)"
      R"({"data_offsets":[88,96],"dtype":"I64","shape":[]}}   )";
  REQUIRE(expected_json.size() == 240);
  auto l = layout_safetensors(
      {{"model.embed", DType::BF16, {4, 8}}, {"layers.0.w", DType::F32, {2, 3}}, {"scalar", DType::I64, {}}},
      {{"step", "100"}, {"format", "pt"}});
  REQUIRE(l.is_ok());
  CHECK(l->header == le64(240) + expected_json);
  CHECK(l->file_size() == 8 + 240 + 96);
  // Entries keep the order given and are packed with no gaps.
  REQUIRE(l->entries.size() == 3);
  CHECK(l->entries[0].name == "model.embed");
  CHECK(l->entries[0].begin == 0);
  CHECK(l->entries[0].end == 64);
  CHECK(l->entries[1].name == "layers.0.w");
  CHECK(l->entries[1].begin == 64);
  CHECK(l->entries[1].end == 88);
  CHECK(l->entries[2].name == "scalar");
  CHECK(l->entries[2].begin == 88);
  CHECK(l->entries[2].end == 96);
}

TEST_CASE("layout_safetensors omits __metadata__ when there is none and pads with spaces to 8", "[safetensors]") {
  auto l = layout_safetensors({{"a", DType::U8, {3}}});
  REQUIRE(l.is_ok());
  CHECK(l->header == le64(56) + R"({"a":{"data_offsets":[0,3],"dtype":"U8","shape":[3]}}   )");
  CHECK(l->file_size() == 64 + 3);

  auto empty = layout_safetensors({});
  REQUIRE(empty.is_ok());
  CHECK(empty->header == le64(8) + "{}      ");
  CHECK(empty->file_size() == 16);
}

TEST_CASE("layout_safetensors refuses duplicate and reserved names", "[safetensors]") {
  auto dup = layout_safetensors({{"w", DType::F32, {1}}, {"v", DType::F32, {1}}, {"w", DType::F16, {2}}});
  REQUIRE_FALSE(dup.is_ok());
  CHECK(dup.status().code() == Code::kInvalidArgument);
  CHECK_THAT(dup.status().message(), Catch::Contains("'w'"));

  auto reserved = layout_safetensors({{"__metadata__", DType::F32, {1}}});
  REQUIRE_FALSE(reserved.is_ok());
  CHECK(reserved.status().code() == Code::kInvalidArgument);

  auto negative = layout_safetensors({{"n", DType::F32, {2, -1}}});
  REQUIRE_FALSE(negative.is_ok());
  CHECK(negative.status().code() == Code::kInvalidArgument);

  auto bad_utf8 = layout_safetensors({{"bad\xff", DType::F32, {1}}});
  REQUIRE_FALSE(bad_utf8.is_ok());
  CHECK(bad_utf8.status().code() == Code::kInvalidArgument);
}

TEST_CASE("a laid out file parses back to the same entries and metadata", "[safetensors]") {
  const std::vector<TensorDecl> decls = {{"a.bias", DType::F16, {3}},
                                         {"a.weight", DType::BF16, {3, 5}},
                                         {"b.empty", DType::F32, {0, 7}},
                                         {"b.flag", DType::BOOL, {}},
                                         {"c.f8", DType::F8_E4M3, {2, 2, 2}}};
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "quote \" and \\ and é"}};
  auto l = layout_safetensors(decls, meta);
  REQUIRE(l.is_ok());
  CHECK(l->header.size() % 8 == 0);
  const std::string bytes = l->header + std::string(l->file_size() - l->header.size(), 'x');

  auto h = parse(bytes);
  REQUIRE(h.is_ok());
  CHECK(h->header_len == l->header.size() - 8);
  CHECK(h->data_start == l->header.size());
  CHECK(h->metadata == meta);
  REQUIRE(h->entries.size() == decls.size());
  for (size_t i = 0; i < decls.size(); ++i) {
    INFO(decls[i].name);
    const SafetensorsEntry* e = h->find(decls[i].name);
    REQUIRE(e != nullptr);
    CHECK(e->dtype == decls[i].dtype);
    CHECK(e->shape == decls[i].shape);
    CHECK(e->begin == l->entries[i].begin);
    CHECK(e->end == l->entries[i].end);
  }
  CHECK(h->find("missing") == nullptr);
  // Sorted by begin; the empty tensor sits between its neighbours.
  for (size_t i = 1; i < h->entries.size(); ++i) CHECK(h->entries[i - 1].end == h->entries[i].begin);
}

TEST_CASE("parse_safetensors returns entries sorted by begin offset, whatever the JSON order", "[safetensors]") {
  auto h = parse(file_with(R"({"z":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                           R"("a":{"dtype":"U8","shape":[3],"data_offsets":[2,5]},)"
                           R"("m":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})",
                           5));
  REQUIRE(h.is_ok());
  REQUIRE(h->entries.size() == 3);
  CHECK(h->entries[0].name == "z");
  CHECK(h->entries[1].name == "m");  // zero-size, ties broken by end then name
  CHECK(h->entries[2].name == "a");
  CHECK(h->metadata.empty());
}

TEST_CASE("parse_safetensors accepts a header padded with spaces and an empty file body", "[safetensors]") {
  CHECK(parse(file_with("{}      ", 0)).is_ok());
  CHECK(parse(file_with(R"({"__metadata__":{}})", 0)).is_ok());
}

TEST_CASE("safetensors_header_len refuses truncated files and absurd lengths", "[safetensors]") {
  auto short_file = safetensors_header_len("\x02\0\0", 3, kFile);
  REQUIRE_FALSE(short_file.is_ok());
  CHECK(short_file.status().code() == Code::kCorrupt);
  CHECK_THAT(short_file.status().message(), Catch::Contains(kFile) && Catch::Contains("truncated"));

  auto huge = safetensors_header_len(le64(kMaxSafetensorsHeader + 1), uint64_t{1} << 40, kFile);
  REQUIRE_FALSE(huge.is_ok());
  CHECK(huge.status().code() == Code::kCorrupt);
  CHECK_THAT(huge.status().message(), Catch::Contains("exceeds"));

  auto absurd = safetensors_header_len(le64(~uint64_t{0}), 100, kFile);
  REQUIRE_FALSE(absurd.is_ok());
  CHECK(absurd.status().code() == Code::kCorrupt);

  auto past_end = safetensors_header_len(le64(93), 100, kFile);
  REQUIRE_FALSE(past_end.is_ok());
  CHECK_THAT(past_end.status().message(), Catch::Contains("truncated") && Catch::Contains("101"));

  auto exact = safetensors_header_len(le64(92), 100, kFile);
  REQUIRE(exact.is_ok());
  CHECK(*exact == 92);
}

TEST_CASE("parse_safetensors refuses a prefix or file too short for its header", "[safetensors]") {
  const std::string bytes = file_with(kOneTensor, 8);
  // File shorter than the 8-byte length.
  auto tiny = parse_safetensors(bytes.substr(0, 5), 5, kFile);
  REQUIRE_FALSE(tiny.is_ok());
  CHECK(tiny.status().code() == Code::kCorrupt);
  // The file is whole but the caller gave too short a prefix.
  auto prefix = parse_safetensors(std::string_view(bytes).substr(0, 20), bytes.size(), kFile);
  REQUIRE_FALSE(prefix.is_ok());
  CHECK(prefix.status().code() == Code::kCorrupt);
  CHECK_THAT(prefix.status().message(), Catch::Contains("truncated"));
  // The file ends inside the header.
  auto cut = parse_safetensors(bytes.substr(0, 30), 30, kFile);
  REQUIRE_FALSE(cut.is_ok());
  CHECK(cut.status().code() == Code::kCorrupt);
  CHECK_THAT(cut.status().message(), Catch::Contains("truncated"));
  // The data area ends early: the tensor runs past it.
  expect_corrupt(kOneTensor, 7, "past the data area");
}

TEST_CASE("parse_safetensors refuses headers that are not a JSON object", "[safetensors]") {
  expect_corrupt(R"({"a":{"dtype":"F32",)", 0, "not valid JSON");
  expect_corrupt("", 0, "header does not start with '{'");
  // NUL padding, and bytes hidden after a NUL (nlohmann alone would stop reading there).
  expect_corrupt(std::string("{}\0\0\0\0\0\0", 8), 0, "not valid JSON");
  expect_corrupt(std::string("{}\0{\"x\":1}", 10), 0, "not valid JSON");
  // The header opens with '{', as safetensors has it: no other JSON value, no space, no byte
  // order mark (which the JSON parser skipped).
  expect_corrupt("[1, 2]", 0, "header does not start with '{'");
  expect_corrupt("\"str\"", 0, "header does not start with '{'");
  expect_corrupt(" {}", 0, "header does not start with '{'");
  expect_corrupt("\xEF\xBB\xBF{}", 0, "header does not start with '{'");
  expect_corrupt(R"({"a":"F32"})", 0, "tensor 'a'");
}

TEST_CASE("parse_safetensors refuses entries with unknown, missing or duplicate members", "[safetensors]") {
  expect_corrupt(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", 8,
                 "tensor 'w': unknown member 'extra'");
  expect_corrupt(R"({"w":{"dtype":"F32","shape":[2]}})", 8, "tensor 'w': missing member 'data_offsets'");
  expect_corrupt(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8, "tensor 'w': missing member 'dtype'");
  expect_corrupt(R"({"w":{"dtype":"F32","shape":[2],"shape":[2],"data_offsets":[0,8]}})", 8, "duplicate key 'shape'");
  expect_corrupt(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"w":{"dtype":"U8","shape":[4],)"
                 R"("data_offsets":[0,4]}})",
                 4, "duplicate key 'w'");
}

TEST_CASE("parse_safetensors refuses unknown dtypes and malformed shapes and offsets", "[safetensors]") {
  expect_corrupt(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,1]}})", 1, "tensor 'w': unknown dtype 'Q4'");
  expect_corrupt(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,1]}})", 1, "tensor 'w': dtype");
  expect_corrupt(R"({"w":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})", 2, "tensor 'w': shape [-2]");
  expect_corrupt(R"({"w":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})", 2, "tensor 'w': shape");
  expect_corrupt(R"({"w":{"dtype":"U8","shape":2,"data_offsets":[0,2]}})", 2, "tensor 'w': shape");
  expect_corrupt(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2,4]}})", 2, "tensor 'w': data_offsets");
  expect_corrupt(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[-1,1]}})", 2, "tensor 'w': data_offsets");
  expect_corrupt(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[2,0]}})", 2, "tensor 'w': data_offsets [2, 0)");
  expect_corrupt(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8,
                 "tensor 'w': F64 [4294967296, 4294967296] is too large");
}

TEST_CASE("parse_safetensors names the tensor whose offsets disagree with dtype and shape", "[safetensors]") {
  auto r = parse(file_with(R"({"layers.0.w":{"dtype":"BF16","shape":[4,8],"data_offsets":[0,100]}})", 100));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kCorrupt);
  CHECK(r.status().message() ==
        "ckpt/tp0-pp0.safetensors: tensor 'layers.0.w': data_offsets [0, 100) hold 100 bytes but BF16 [4, 8] needs 64");
}

TEST_CASE("parse_safetensors refuses offsets past the end of the data area", "[safetensors]") {
  expect_corrupt(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                 6, "tensor 'b': data_offsets [4, 8) run past the data area of 6 bytes");
}

TEST_CASE("parse_safetensors refuses overlapping ranges", "[safetensors]") {
  expect_corrupt(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                 6, "tensor 'b': data_offsets [2, 6) overlap tensor 'a' at [0, 4)");
  // Two tensors on the same bytes.
  expect_corrupt(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                 4, "overlap tensor 'a'");
  // A zero-size tensor inside another one.
  expect_corrupt(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                 R"("e":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})",
                 4, "tensor 'e'");
}

TEST_CASE("parse_safetensors refuses holes in the data area", "[safetensors]") {
  expect_corrupt(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                 10, "tensor 'b': data_offsets [6, 10) leave a hole [4, 6)");
  expect_corrupt(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6, "leave a hole [0, 2)");
  // Trailing bytes no tensor claims.
  expect_corrupt(kOneTensor, 9, "tensors cover [0, 8) but the data area holds 9 bytes");
  expect_corrupt("{}", 1, "tensors cover [0, 0) but the data area holds 1 bytes");
}

TEST_CASE("parse_safetensors requires __metadata__ to map strings to strings", "[safetensors]") {
  auto ok = parse(file_with(R"({"__metadata__":{"format":"pt","step":"7"}})", 0));
  REQUIRE(ok.is_ok());
  CHECK(ok->metadata == std::map<std::string, std::string>{{"format", "pt"}, {"step", "7"}});
  CHECK(ok->entries.empty());

  expect_corrupt(R"({"__metadata__":["format","pt"]})", 0, "__metadata__ is a JSON array");
  expect_corrupt(R"({"__metadata__":"pt"})", 0, "__metadata__ is a JSON string");
  expect_corrupt(R"({"__metadata__":{"step":7}})", 0, "__metadata__ 'step' is a JSON number");
  expect_corrupt(R"({"__metadata__":{"nested":{"a":"b"}}})", 0, "__metadata__ 'nested'");
}
