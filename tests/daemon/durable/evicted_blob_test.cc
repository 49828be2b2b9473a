// Evicted blobs (daemon/durable/evicted_blob.h): the record's codec, the merging of ranges, and
// the map of a version's blobs into its copy's rank files, checked byte for byte against the
// rank files the mount shows (an import's version, and a repartition's with strided extents).
#include "daemon/durable/evicted_blob.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "daemon/durable/durable_plan.h"
#include "daemon/reshard/importer.h"
#include "daemon/reshard/repartition.h"
#include "daemon/store/file_util.h"
#include "fs/views.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/fs/fake_step.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;
using namespace ptcfs::durable;

namespace {

// Every mapped byte of every blob equals the byte of the rank file it names; returns the bytes mapped.
uint64_t check_map(Store& store, const std::shared_ptr<const StepVersion>& v) {
  std::map<uint64_t, std::vector<CopyRange>> ranges;
  REQUIRE(copy_ranges(*v, step_prefix(v->job(), v->step()), ranges).is_ok());
  std::map<std::string, std::string> files;  // object -> bytes
  for (const auto& shard : v->layout().shards())
    files[step_prefix(v->job(), v->step()) + rank_file(shard)] =
        fs::testing::read_all(*fs::shard_safetensors_view(v, shard));
  uint64_t mapped = 0;
  for (auto& [blob, rs] : ranges) {
    auto f = store.blobs().file(blob);
    REQUIRE(f.is_ok());
    for (const auto& r : merge_ranges(rs)) {
      INFO(r.object << " at " << r.object_off);
      std::string got(r.len, '\0');
      REQUIRE(*read_full((*f)->fd(), r.blob_off, got.data(), r.len, "blob") == r.len);
      REQUIRE(files.count(r.object));
      CHECK(got == files[r.object].substr(r.object_off, r.len));
      mapped += r.len;
    }
  }
  return mapped;
}

}  // namespace

TEST_CASE("an evicted blob's record round-trips, and a malformed one is refused naming the fault", "[evicted]") {
  EvictedBlob e{0xab, 100, 77, {{0, 10, "j/1/tp0-pp0.safetensors", 88}, {20, 80, "j/1/tp1-pp0.safetensors", 8}}};
  auto back = evicted_from_json(evicted_json(e), "k");
  REQUIRE(back.is_ok());
  CHECK(back->blob == 0xab);
  CHECK(back->size == 100);
  CHECK(back->xxh3 == 77);
  CHECK(back->ranges == e.ranges);
  CHECK(back->covered() == 90);
  CHECK(evicted_key(0xab) == "evicted/00000000000000ab");
  for (const char* bad :
       {"[]", R"({"blob":1,"size":10,"xxh3":1})", R"({"blob":1,"size":10,"xxh3":1,"ranges":[[0,5]]})",
        R"({"blob":1,"size":10,"xxh3":1,"ranges":[[0,5,"a",0],[4,2,"a",9]]})",
        R"({"blob":1,"size":10,"xxh3":1,"ranges":[[8,5,"a",0]]})", R"({"blob":-1,"size":10,"xxh3":1,"ranges":[]})"}) {
    INFO(bad);
    auto r = evicted_from_json(bad, "evicted/x");
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kCorrupt);
    CHECK(r.status().message().find("evicted/x") != std::string::npos);
  }
}

TEST_CASE("ranges are merged: named twice kept once, neighbours in one object joined", "[evicted]") {
  const std::vector<CopyRange> in{{10, 5, "a", 110}, {0, 10, "a", 100},
                                  {0, 10, "a", 100}, {12, 6, "a", 112},  // overlaps the first: its tail only
                                  {18, 2, "b", 0},   {20, 3, "b", 7}};
  const std::vector<CopyRange> want{{0, 18, "a", 100}, {18, 2, "b", 0}, {20, 3, "b", 7}};
  CHECK(merge_ranges(in) == want);
  CHECK(merge_ranges({}).empty());
}

TEST_CASE("a version's blobs map into its copy's rank files byte for byte, after a repartition too", "[evicted]") {
  testing::TempDir tmp;
  auto store = testing::open_store(tmp.path() + "/data");
  testing::write_checkpoint(tmp.path() + "/ck", testing::kPtcJson);
  REQUIRE(import_checkpoint(*store, tmp.path() + "/ck", "j", "1").is_ok());
  auto v1 = testing::find_step(*store, "j", "1");
  CHECK(check_map(*store, v1) == v1->total_bytes());
  // tp=1: slices re-cut along a column split (strided extents) and joined from two blobs.
  RepartitionRequest req;
  req.job = "j";
  req.step = "1";
  req.to = ptc::Parallelism{1, 2, 1};
  REQUIRE(repartition(*store, req).is_ok());
  auto v2 = testing::find_step(*store, "j", "1");
  REQUIRE(v2->version() == 2);
  CHECK(check_map(*store, v2) == v2->total_bytes());
}
