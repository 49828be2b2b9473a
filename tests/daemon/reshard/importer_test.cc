// Import of a checkpoint directory into the local store (daemon/reshard/importer.h), with real
// RocksDB and real blob files in a temporary directory: reads of every slice, restart, and the
// all-or-nothing rules.
#include "daemon/reshard/importer.h"

#include <unistd.h>
#include <xxhash.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/store/store.h"
#include "ptc/formats/safetensors.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;
using namespace ptcfs::testing;
namespace stdfs = std::filesystem;

TEST_CASE("import stores every slice with its checksum and a restart reads the same", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  const SliceBytes want = write_checkpoint(ckpt, kPtcJson);
  // Shards hold: pp0 {emb, layers.0.qkv, step}, pp1 {final.w, layers.1.dense, layers.1.ln, step}.
  REQUIRE(want.size() == 2 * 3 + 2 * 4);
  uint64_t want_bytes = 0;
  for (const auto& [_, b] : want) want_bytes += b.size();
  // emb 8x4 BF16 = 64, qkv 4x3 F32 = 48, step 8; final 16, dense 3x2 F16 = 12, ln 20, step 8.
  CHECK(want_bytes == 2 * (64 + 48 + 8) + 2 * (16 + 12 + 20 + 8));

  std::vector<uint64_t> blobs_before_restart;
  int64_t created = 0;
  {
    int changes = 0;
    auto opened = Store::open(data, nullptr, nullptr, [&] { ++changes; });
    REQUIRE(opened.is_ok());
    auto store = std::move(opened).value();
    CHECK(stdfs::is_directory(data + "/meta"));
    CHECK(blob_files(data).empty());
    CHECK(store->snapshot()->steps.empty());
    CHECK(changes == 0);

    uint64_t last_done = 0, last_total = 0;
    const int64_t t0 = ::time(nullptr);
    bool monotonic = true;  // checked here: Catch2 assertions are not for worker threads
    auto r = import_checkpoint(*store, ckpt, "gpt", "100", [&](uint64_t done, uint64_t total) {
      monotonic = monotonic && done >= last_done;
      last_done = done;
      last_total = total;
    });
    const int64_t t1 = ::time(nullptr);
    INFO(r.status().to_string());
    REQUIRE(r.is_ok());
    CHECK(r->job == "gpt");
    CHECK(r->step == "100");
    CHECK(r->shards == 4);
    CHECK(r->tensors == 6);
    CHECK(r->bytes == want_bytes);
    CHECK(monotonic);
    CHECK(last_done == want_bytes);
    CHECK(last_total == want_bytes);
    CHECK(changes == 1);

    CHECK(store->snapshot()->steps.size() == 1);
    check_step(*store, "gpt", "100", want);
    const auto v = find_step(*store, "gpt", "100");
    created = v->mtime();
    CHECK(created >= t0);
    CHECK(created <= t1);
    // One blob per rank file, and those are the only blob files.
    blobs_before_restart = v->blobs_used();
    CHECK(blobs_before_restart.size() == 4);
    std::set<std::string> names;
    for (uint64_t id : blobs_before_restart) names.insert(stdfs::path(store->blobs().path(id)).filename().string());
    CHECK(blob_files(data) == names);
  }

  // Restart: a new Store on the same directory loads the same step.
  auto store = open_store(data);
  CHECK(store->snapshot()->steps.size() == 1);
  check_step(*store, "gpt", "100", want);
  const auto v = find_step(*store, "gpt", "100");
  CHECK(v->mtime() == created);
  CHECK(v->blobs_used() == blobs_before_restart);
  CHECK(blob_files(data).size() == 4);
}

TEST_CASE("a rank file with a wrong slice shape fails naming file and tensor and imports nothing", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  write_checkpoint(ckpt, kPtcJson);
  // tp1-pp0 holds emb as 8x4 (padded); write it as 5x4 instead (the unpadded rows).
  auto sl = formats::layout_safetensors(
      {{"emb", ptc::DType::BF16, {5, 4}}, {"layers.0.qkv", ptc::DType::F32, {4, 3}}, {"step", ptc::DType::I64, {}}});
  REQUIRE(sl.is_ok());
  write_file(ckpt + "/tp1-pp0.safetensors", sl->header + std::string(sl->file_size() - sl->header.size(), 'x'));

  auto store = open_store(data);
  auto r = import_checkpoint(*store, ckpt, "gpt", "100");
  REQUIRE_FALSE(r.is_ok());
  INFO(r.status().to_string());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains(ckpt + "/tp1-pp0.safetensors"));
  CHECK_THAT(r.status().message(), Catch::Contains("tensor 'emb' has shape [5, 4]"));
  CHECK_THAT(r.status().message(), Catch::Contains("[8, 4]"));
  CHECK(store->snapshot()->steps.empty());
  CHECK(blob_files(data).empty());

  // The name is free again: a good import under it succeeds.
  const SliceBytes want = write_checkpoint(ckpt, kPtcJson);
  auto ok = import_checkpoint(*store, ckpt, "gpt", "100");
  INFO(ok.status().to_string());
  REQUIRE(ok.is_ok());
  check_step(*store, "gpt", "100", want);
}

TEST_CASE("a rank file with a wrong dtype fails naming file and tensor", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  write_checkpoint(ckpt, kPtcJson);
  auto sl = formats::layout_safetensors({{"final.w", ptc::DType::F16, {2, 2}},
                                         {"layers.1.dense", ptc::DType::F16, {3, 2}},
                                         {"layers.1.ln", ptc::DType::F32, {5}},
                                         {"step", ptc::DType::I64, {}}});
  REQUIRE(sl.is_ok());
  write_file(ckpt + "/tp0-pp1.safetensors", sl->header + std::string(sl->file_size() - sl->header.size(), 'x'));

  auto store = open_store(data);
  auto r = import_checkpoint(*store, ckpt, "gpt", "7");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains(ckpt + "/tp0-pp1.safetensors"));
  CHECK_THAT(r.status().message(), Catch::Contains("tensor 'final.w' has dtype F16 but ptc.json says F32"));
  CHECK(store->snapshot()->steps.empty());
  CHECK(blob_files(data).empty());
}

TEST_CASE("a missing rank file fails naming it and imports nothing", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  write_checkpoint(ckpt, kPtcJson);
  REQUIRE(stdfs::remove(ckpt + "/tp1-pp1.safetensors"));

  auto store = open_store(data);
  auto r = import_checkpoint(*store, ckpt, "gpt", "100");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message() == ckpt + "/tp1-pp1.safetensors: missing rank file for shard tp1-pp1 of tp=2,pp=2,dp=1");
  CHECK(store->snapshot()->steps.empty());
  CHECK(blob_files(data).empty());
}

TEST_CASE("an extra rank file fails naming it and imports nothing", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  write_checkpoint(ckpt, kPtcJson);
  stdfs::copy_file(ckpt + "/tp1-pp1.safetensors", ckpt + "/tp2-pp1.safetensors");

  auto store = open_store(data);
  auto r = import_checkpoint(*store, ckpt, "gpt", "100");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message() == ckpt + "/tp2-pp1.safetensors: extra rank file: tp=2,pp=2,dp=1 has no shard tp2-pp1");
  CHECK(store->snapshot()->steps.empty());
  CHECK(blob_files(data).empty());
}

TEST_CASE("a rank file with truncated data fails as corrupt naming it and imports nothing", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  write_checkpoint(ckpt, kPtcJson);
  const std::string path = ckpt + "/tp0-pp0.safetensors";
  stdfs::resize_file(path, stdfs::file_size(path) - 1);

  auto store = open_store(data);
  auto r = import_checkpoint(*store, ckpt, "gpt", "100");
  REQUIRE_FALSE(r.is_ok());
  INFO(r.status().to_string());
  CHECK(r.status().code() == Code::kCorrupt);
  CHECK_THAT(r.status().message(), Catch::Contains(path));
  CHECK(store->snapshot()->steps.empty());
  CHECK(blob_files(data).empty());
}

TEST_CASE("a bad ptc.json or job name fails before anything is read", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  write_checkpoint(ckpt, kPtcJson);
  auto store = open_store(data);

  auto bad_job = import_checkpoint(*store, ckpt, "../evil", "100");
  REQUIRE_FALSE(bad_job.is_ok());
  CHECK(bad_job.status().code() == Code::kInvalidArgument);
  CHECK_THAT(bad_job.status().message(), Catch::Contains("job name '../evil'"));

  write_file(ckpt + "/ptc.json", R"({"parallelism": {"tp": 3, "pp": 2, "dp": 1}, "num_layers": 2,
      "tensors": {"w": {"dtype": "F32", "shape": [4], "tp_dim": 0}}})");
  auto r = import_checkpoint(*store, ckpt, "gpt", "100");
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains(ckpt + "/ptc.json"));
  CHECK_THAT(r.status().message(), Catch::Contains("tensor 'w'"));
  CHECK(store->snapshot()->steps.empty());
  CHECK(blob_files(data).empty());
}

TEST_CASE("importing the same job and step twice fails with already_exists and keeps the first", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt", other = tmp.path() + "/other";
  const SliceBytes want = write_checkpoint(ckpt, kPtcJson);
  write_checkpoint(other, kPtcJson, /*salt=*/2);
  auto store = open_store(data);
  REQUIRE(import_checkpoint(*store, ckpt, "gpt", "100").is_ok());
  const auto blobs = blob_files(data);
  REQUIRE(blobs.size() == 4);

  auto again = import_checkpoint(*store, other, "gpt", "100");
  REQUIRE_FALSE(again.is_ok());
  CHECK(again.status().code() == Code::kAlreadyExists);
  CHECK_THAT(again.status().message(), Catch::Contains("gpt/100"));
  CHECK(blob_files(data) == blobs);
  CHECK(store->snapshot()->steps.size() == 1);
  check_step(*store, "gpt", "100", want);
}

TEST_CASE("one checkpoint imported under two names reads back under both", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  const SliceBytes want = write_checkpoint(ckpt, kPtcJson);
  {
    auto store = open_store(data);
    auto a = import_checkpoint(*store, ckpt, "gpt", "100");
    auto b = import_checkpoint(*store, ckpt, "bert", "100");
    auto c = import_checkpoint(*store, ckpt, "gpt", "200");
    REQUIRE(a.is_ok());
    REQUIRE(b.is_ok());
    REQUIRE(c.is_ok());
    CHECK(store->snapshot()->steps.size() == 3);
    check_step(*store, "gpt", "100", want);
    check_step(*store, "bert", "100", want);
    check_step(*store, "gpt", "200", want);
    // Each import wrote its own blobs.
    CHECK(blob_files(data).size() == 12);
  }
  auto store = open_store(data);
  CHECK(store->snapshot()->steps.size() == 3);
  check_step(*store, "gpt", "100", want);
  check_step(*store, "bert", "100", want);
  check_step(*store, "gpt", "200", want);
  CHECK(blob_files(data).size() == 12);
}
