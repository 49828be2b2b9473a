// The step copies under an S3 prefix (cli/ls_s3.h), from a listing: which folders are copies, and
// what each is (whole, incomplete, damaged, unchecked), exactly.
#include "cli/ls_s3.h"

#include <catch2/catch.hpp>

using namespace ptcfs;
using namespace ptcfs::cli;

namespace {

formats::ExportManifest manifest() {
  formats::ExportManifest m;
  m.version = 3;
  m.origin = "ab";
  m.files = {{"tp0-pp0.safetensors", 100, 1}, {"tp1-pp0.safetensors", 50, 2}};
  return m;
}

}  // namespace

TEST_CASE("the copies of a listing are the folders holding ptc.json or a manifest, part records aside", "[ls_s3]") {
  const std::vector<transport::S3Object> objects = {
      {"ck/gpt/1/ptc.json", 10, ""},
      {"ck/gpt/1/ptcfs-export.json", 20, ""},
      {"ck/gpt/1/tp0-pp0.safetensors", 100, ""},
      {"ck/gpt/1/.ptcfs-parts/tp0-pp0.safetensors.json", 5, ""},
      {"ck/gpt/2/tp0-pp0.safetensors", 100, ""},  // no ptc.json, no manifest: not a copy (yet)
      {"ck/gpt/3/ptcfs-export.json", 20, ""},
      {"ck/ptc.json", 10, ""},
      {"other/ptc.json", 10, ""},  // outside the prefix
  };
  const auto f = copy_folders(objects, "ck/");
  REQUIRE(f.size() == 3);
  CHECK(f[0].dir == "");
  CHECK(f[0].files == std::map<std::string, uint64_t>{{"ptc.json", 10}});
  CHECK(f[1].dir == "gpt/1/");
  CHECK(f[1].files ==
        std::map<std::string, uint64_t>{{"ptc.json", 10}, {"ptcfs-export.json", 20}, {"tp0-pp0.safetensors", 100}});
  CHECK(f[2].dir == "gpt/3/");
}

TEST_CASE("a copy is whole only with ptc.json and every file at the size its manifest states", "[ls_s3]") {
  CopyFolder f{
      "gpt/1/",
      {{"ptc.json", 10}, {"ptcfs-export.json", 20}, {"tp0-pp0.safetensors", 100}, {"tp1-pp0.safetensors", 50}}};
  auto s = copy_state(f, manifest());
  CHECK(s.state == "whole");
  CHECK(s.note.empty());
  CHECK((s.files == 2 && s.bytes == 150));

  CopyFolder cut = f;
  cut.files.erase("ptc.json");
  s = copy_state(cut, manifest());
  CHECK(s.state == "incomplete");
  CHECK(s.note.find("no ptc.json") != std::string::npos);

  CopyFolder missing = f;
  missing.files.erase("tp1-pp0.safetensors");
  s = copy_state(missing, manifest());
  CHECK(s.state == "damaged");
  CHECK(s.note == "tp1-pp0.safetensors is missing");

  CopyFolder shorter = f;
  shorter.files["tp0-pp0.safetensors"] = 99;
  s = copy_state(shorter, manifest());
  CHECK(s.state == "damaged");
  CHECK(s.note == "tp0-pp0.safetensors is 99 bytes; the manifest states 100");

  CopyFolder other_tool{"x/", {{"ptc.json", 10}, {"tp0-pp0.safetensors", 70}, {"notes.txt", 5}}};
  s = copy_state(other_tool, std::nullopt);
  CHECK(s.state == "unchecked");
  CHECK((s.files == 1 && s.bytes == 70));
}
