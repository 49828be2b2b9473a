// ptcfs-export.json (ptc/formats/export_manifest.h): written and read back exactly, and every
// malformed manifest refused with the object's name and what is wrong.
#include "ptc/formats/export_manifest.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

using namespace ptcfs;
using namespace ptcfs::formats;

namespace {
std::string refusal(std::string_view text) {
  auto m = parse_export_manifest(text, "s3://b/p/ptcfs-export.json");
  REQUIRE(!m.is_ok());
  return m.status().message();
}
}  // namespace

TEST_CASE("a manifest reads back as written, sorted by name, its digests as 16 hex digits", "[export_manifest]") {
  ExportManifest m;
  m.version = 7;
  m.origin = "5f1e";
  m.files = {{"tp1-pp0.safetensors", 5, 9}, {"tp0-pp0.safetensors", 123, 0xfedcba9876543210ull}};
  const std::string text = export_manifest_text(m);
  CHECK(text.find("\"xxh3\": \"fedcba9876543210\"") != std::string::npos);
  CHECK(text.find("\"xxh3\": \"0000000000000009\"") != std::string::npos);
  auto back = parse_export_manifest(text, "m");
  REQUIRE(back.is_ok());
  CHECK(back->version == 7);
  CHECK(back->origin == "5f1e");
  REQUIRE(back->files.size() == 2);
  CHECK(back->files[0] == ExportFile{"tp0-pp0.safetensors", 123, 0xfedcba9876543210ull});
  CHECK(back->files[1] == ExportFile{"tp1-pp0.safetensors", 5, 9});
  REQUIRE(back->find("tp1-pp0.safetensors"));
  CHECK(back->find("nope") == nullptr);
  // `ptcfs export` states no version.
  auto plain = parse_export_manifest(R"({"format": "ptcfs-export/1", "files": []})", "m");
  REQUIRE(plain.is_ok());
  CHECK(plain->version == 0);
  CHECK(plain->origin.empty());
  CHECK(export_manifest_text(*plain).find("version") == std::string::npos);
  CHECK(export_manifest_text(*plain).find("origin") == std::string::npos);
  CHECK(refusal(R"({"format": "ptcfs-export/1", "files": [], "origin": 3})").find("origin") != std::string::npos);
}

TEST_CASE("malformed manifests are refused naming the object and the fault", "[export_manifest]") {
  CHECK(refusal("{") == "s3://b/p/ptcfs-export.json: not a ptcfs-export/1 manifest");
  CHECK(refusal(R"({"format": "other", "files": []})").find("not a ptcfs-export/1 manifest") != std::string::npos);
  CHECK(refusal(R"({"format": "ptcfs-export/1"})").find("not a ptcfs-export/1 manifest") != std::string::npos);
  // Found by the fuzz target export_manifest: a "format" of another type threw from json::value.
  CHECK(refusal(R"({"format": 3, "files": [{"name": "f"}]})").find("not a ptcfs-export/1 manifest") !=
        std::string::npos);
  CHECK(refusal(R"({"format": null, "files": []})").find("not a ptcfs-export/1 manifest") != std::string::npos);
  CHECK(refusal(R"({"format": "ptcfs-export/1", "files": [{"name": "a", "size": 1, "xxh3": "0000000000000001"},
                   {"name": "a", "size": 1, "xxh3": "0000000000000001"}]})")
            .find("file 'a' is listed twice") != std::string::npos);
  CHECK(refusal(R"({"format": "ptcfs-export/1", "files": [{"name": "../x", "size": 1, "xxh3": "0000000000000001"}]})")
            .find("'../x' is not a plain name") != std::string::npos);
  CHECK(refusal(R"({"format": "ptcfs-export/1", "files": [{"name": "a", "size": 1, "xxh3": "12"}]})")
            .find("'a' has a bad xxh3 '12'") != std::string::npos);
  CHECK(refusal(R"({"format": "ptcfs-export/1", "files": [{"name": "a", "size": 1, "xxh3": "zz00000000000000"}]})")
            .find("bad xxh3") != std::string::npos);
  CHECK(refusal(R"({"format": "ptcfs-export/1", "files": [{"name": "a", "size": -1, "xxh3": "0000000000000001"}]})")
            .find("size") != std::string::npos);
  CHECK(refusal(R"({"format": "ptcfs-export/1", "files": [7]})").find("not an object") != std::string::npos);
}
