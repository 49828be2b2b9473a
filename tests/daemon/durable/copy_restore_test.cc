// A node's shards rebuilt over a durable copy (daemon/durable/copy_restore.h): the slices planned
// over the copy's rank files give, byte for byte, the rank files the mount shows for the version,
// at the copy's own layout and at another one, and a manifest that does not state the copy's
// files is refused naming the file.
#include "daemon/durable/copy_restore.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/durable/durable_plan.h"
#include "daemon/reshard/importer.h"
#include "daemon/reshard/repartition.h"
#include "daemon/store/checksum.h"
#include "fs/views.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/fs/fake_step.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;
using namespace ptcfs::durable;

namespace {

// The copy of `v`: its rank files' bytes by object name under `dir`, and its manifest.
std::map<std::string, std::string> copy_of(const std::shared_ptr<const StepVersion>& v, const std::string& dir,
                                           formats::ExportManifest& m) {
  std::map<std::string, std::string> files;
  for (const auto& shard : v->layout().shards()) {
    std::string bytes = fs::testing::read_all(*fs::shard_safetensors_view(v, shard));
    m.files.push_back({rank_file(shard), bytes.size(), xxh3_of(bytes.data(), bytes.size())});
    files[dir + rank_file(shard)] = std::move(bytes);
  }
  std::sort(m.files.begin(), m.files.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return files;
}

// Shard `s` of `to` as a rank file, its slices read from `r`'s blobs (each a whole copy file).
std::string rank_file_of(const ptc::Layout& to, size_t s, const CopyRestore& r,
                         const std::map<std::string, std::string>& files) {
  std::map<uint64_t, const std::string*> blob;
  for (const auto& b : r.blobs) {
    REQUIRE(b.ranges.size() == 1);
    CHECK(b.ranges[0].blob_off == 0);
    CHECK(b.ranges[0].object_off == 0);
    CHECK(b.ranges[0].len == b.size);
    blob[b.blob] = &files.at(b.ranges[0].object);
    CHECK(b.size == blob[b.blob]->size());
  }
  auto file = fs::shard_safetensors_layout(to, to.shards()[s]);
  REQUIRE(file.is_ok());
  std::string out = file->header;
  for (const StoredSlice& slice : r.stored.at(s))
    for_each_piece(slice, 0, slice_bytes(slice), [&](uint64_t id, uint64_t off, uint64_t n) {
      if (id == kZeroBlob) {
        out.append(n, '\0');
        return;
      }
      REQUIRE(blob.count(id));
      out += blob[id]->substr(off, n);
    });
  return out;
}

uint64_t counter_blob(uint64_t& next, uint64_t) { return next++; }

}  // namespace

TEST_CASE("shards restored over a copy read as the version's rank files, at its layout and another", "[copy_restore]") {
  testing::TempDir tmp;
  auto store = testing::open_store(tmp.path() + "/data");
  testing::write_checkpoint(tmp.path() + "/ck", testing::kPtcJson);
  REQUIRE(import_checkpoint(*store, tmp.path() + "/ck", "j", "1").is_ok());
  auto v1 = testing::find_step(*store, "j", "1");
  const std::string dir = step_prefix("j", "1");
  formats::ExportManifest m;
  const auto files = copy_of(v1, dir, m);
  uint64_t next = 100;
  const auto new_blob = [&](uint64_t size) -> Result<uint64_t> { return counter_blob(next, size); };

  SECTION("at the copy's layout each shard is its own file, whole") {
    const auto& layout = v1->layout();
    for (size_t s = 0; s < layout.shards().size(); ++s) {
      auto r = plan_copy_restore(layout, m, dir, layout, {s}, new_blob);
      REQUIRE(r.is_ok());
      REQUIRE(r->blobs.size() == 1);
      CHECK(r->blobs[0].ranges[0].object == dir + rank_file(layout.shards()[s]));
      CHECK(r->blobs[0].xxh3 == m.find(rank_file(layout.shards()[s]))->xxh3);
      CHECK(rank_file_of(layout, s, *r, files) == files.at(dir + rank_file(layout.shards()[s])));
    }
  }
  SECTION("at another layout (strided extents, slices from two files) every shard reads as the mount's") {
    RepartitionRequest req;
    req.job = "j";
    req.step = "1";
    req.to = ptc::Parallelism{1, 2, 1};
    REQUIRE(repartition(*store, req).is_ok());
    auto v2 = testing::find_step(*store, "j", "1");
    REQUIRE(v2->version() == 2);
    const auto& to = v2->layout();
    std::vector<size_t> all;
    for (size_t s = 0; s < to.shards().size(); ++s) all.push_back(s);
    auto r = plan_copy_restore(v1->layout(), m, dir, to, all, new_blob);
    REQUIRE(r.is_ok());
    CHECK(r->blobs.size() == v1->layout().shards().size());  // each copy file once: both tp files of each stage
    for (size_t s = 0; s < to.shards().size(); ++s)
      CHECK(rank_file_of(to, s, *r, files) == fs::testing::read_all(*fs::shard_safetensors_view(v2, to.shards()[s])));
  }
  SECTION("a shard at another layout reads only the files its TP-split tensors are in") {
    // tp=4,pp=1: tp2-pp0 holds half of tp1's split tensors of both stages; its replicated tensors
    // (in every file of their stage) come from those two files too, not from tp0's.
    auto to = ptc::Layout::make(v1->layout().ptc(), ptc::Parallelism{4, 1, 1});
    REQUIRE(to.is_ok());
    size_t tp2 = to->shards().size();
    for (size_t s = 0; s < to->shards().size(); ++s)
      if (to->shards()[s].name() == "tp2-pp0") tp2 = s;
    REQUIRE(tp2 < to->shards().size());
    auto r = plan_copy_restore(v1->layout(), m, dir, *to, {tp2}, new_blob);
    REQUIRE(r.is_ok());
    std::set<std::string> objects;
    for (const auto& b : r->blobs) objects.insert(b.ranges.at(0).object);
    CHECK(objects == std::set<std::string>{dir + "tp1-pp0.safetensors", dir + "tp1-pp1.safetensors"});
    CHECK(r->stored.size() == 1);
  }
  SECTION("a manifest that lacks a file or states another size is refused naming the file") {
    const auto& layout = v1->layout();
    const std::string name = rank_file(layout.shards()[0]);
    formats::ExportManifest short_one = m;
    for (auto& f : short_one.files)
      if (f.name == name) f.size -= 1;
    auto r = plan_copy_restore(layout, short_one, dir, layout, {0}, new_blob);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kCorrupt);
    CHECK(r.status().message().find(name) != std::string::npos);
    formats::ExportManifest lacking = m;
    lacking.files.erase(
        std::remove_if(lacking.files.begin(), lacking.files.end(), [&](const auto& f) { return f.name == name; }),
        lacking.files.end());
    r = plan_copy_restore(layout, lacking, dir, layout, {0}, new_blob);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kCorrupt);
    CHECK(r.status().message().find(name) != std::string::npos);
    // A shard that does not use the file needs no entry for it.
    if (layout.shards().size() > 1) CHECK(plan_copy_restore(layout, lacking, dir, layout, {1}, new_blob).is_ok());
  }
}
