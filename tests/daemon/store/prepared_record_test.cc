// Prepared changes kept in the metadata across a restart (daemon/store/prepared_record.h):
// real RocksDB and blob files; the store is closed and opened again between keeping a
// change and restoring it, as a daemon that was killed would be.
#include "daemon/store/prepared_record.h"

#include <catch2/catch.hpp>

#include <string>

#include "daemon/reshard/importer.h"
#include "ptc/base/json_util.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;
using namespace ptcfs::testing;
using nlohmann::json;

namespace {

const json kAbout = {{"key", "/ptcfs/steps/gpt/100"}, {"coordinator", "n0"}, {"lease", 42}};

Result<PreparedChange> prepare(Store& store, const std::string& ckpt) {
  ImportSummary sum;
  return prepare_import(
      store, ckpt, "gpt", "100", [](const ptc::Layout&) { return Result<StepPlacement>(StepPlacement{}); }, sum);
}

// Prepares an import of `ckpt` as gpt/100 and keeps it under `tx`; the new blob files.
std::set<std::string> keep_import(const std::string& data, const std::string& ckpt, const std::string& tx) {
  auto store = open_store(data);
  const auto before = blob_files(data);
  auto change = prepare(*store, ckpt);
  INFO(change.status().to_string());
  REQUIRE(change.is_ok());
  REQUIRE(can_keep(*change));
  REQUIRE(keep_prepared(*store, tx, *change, kAbout).is_ok());
  std::set<std::string> added;
  for (const auto& f : blob_files(data))
    if (!before.count(f)) added.insert(f);
  REQUIRE(!added.empty());
  return added;  // the store closes without deciding: a crash
}

size_t kept_records(Store& store) {
  size_t n = 0;
  REQUIRE(store
              .scan_meta(Store::kPreparedPrefix,
                         [&](std::string_view, std::string_view) {
                           ++n;
                           return Status::ok();
                         })
              .is_ok());
  return n;
}

}  // namespace

TEST_CASE("a kept import survives a restart with its blobs and commits afterwards", "[prepared]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  const auto want = write_checkpoint(ckpt, kPtcJson);
  const auto added = keep_import(data, ckpt, "tx1");

  auto store = open_store(data);
  for (const auto& f : added) CHECK(blob_files(data).count(f));  // garbage collection left them
  CHECK(store->snapshot()->steps.empty());
  auto kept = restore_prepared(*store);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].tx == "tx1");
  CHECK(kept[0].about == kAbout);
  REQUIRE(kept[0].change.next);
  CHECK(kept[0].change.next->version() == 1);
  CHECK_FALSE(kept[0].change.replaced);
  // The name is reserved again: a second import of it is refused while the change waits.
  CHECK(store->claim(Claim::kNewStep, "gpt", "100").status().code() == Code::kAlreadyExists);
  REQUIRE(commit_change(*store, kept[0].change).is_ok());
  forget_prepared(*store, "tx1");
  check_step(*store, "gpt", "100", want);
  CHECK(kept_records(*store) == 0);
  store.reset();

  store = open_store(data);
  CHECK(restore_prepared(*store).empty());
  check_step(*store, "gpt", "100", want);
}

TEST_CASE("a kept change committed before the restart is only forgotten", "[prepared]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  const auto want = write_checkpoint(ckpt, kPtcJson);
  {
    auto store = open_store(data);
    auto change = prepare(*store, ckpt);
    REQUIRE(change.is_ok());
    REQUIRE(keep_prepared(*store, "tx1", *change, kAbout).is_ok());
    REQUIRE(commit_change(*store, *change).is_ok());  // then the daemon dies before forgetting it
  }
  auto store = open_store(data);
  const auto files = blob_files(data);
  CHECK(restore_prepared(*store).empty());
  CHECK(kept_records(*store) == 0);
  CHECK(blob_files(data) == files);
  check_step(*store, "gpt", "100", want);
  CHECK(store->collect_garbage().value() == 0);
}

TEST_CASE("a kept change whose base moved on, or a malformed one, is dropped with its blobs", "[prepared]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  write_checkpoint(ckpt, kPtcJson);
  const auto added = keep_import(data, ckpt, "tx1");
  {
    // The record now says it replaces version 7, which this node does not have.
    auto store = open_store(data);
    std::string value;
    REQUIRE(store
                ->scan_meta("prepared/tx1",
                            [&](std::string_view, std::string_view v) {
                              value = std::string(v);
                              return Status::ok();
                            })
                .is_ok());
    auto rec = parse_json(value, "record");
    REQUIRE(rec.is_ok());
    (*rec)["replaced"] = 7;
    WriteBatch b;
    b.put("prepared/tx1", rec->dump());
    b.put("prepared/tx2", "{\"blobs\": [1, 2], \"next\": 5");  // cut short
    REQUIRE(store->write_meta(b).is_ok());
  }
  auto store = open_store(data);
  CHECK(restore_prepared(*store).empty());
  CHECK(kept_records(*store) == 0);
  for (const auto& f : added) CHECK_FALSE(blob_files(data).count(f));
  CHECK(store->snapshot()->steps.empty());
  CHECK(store->claim(Claim::kNewStep, "gpt", "100").is_ok());  // nothing holds the name
}

TEST_CASE("a committed version keeps the origin it was committed under across a restart", "[prepared]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  write_checkpoint(ckpt, kPtcJson);
  std::string drawn;
  {
    auto store = open_store(data);
    auto a = prepare(*store, ckpt);
    REQUIRE(a.is_ok());
    a->origin = "tx-cluster-7";  // a cluster's transaction
    REQUIRE(commit_change(*store, *a).is_ok());
    CHECK(store->snapshot()->steps.at({"gpt", "100"})->origin() == "tx-cluster-7");
    // One node alone: commit_change draws an origin no other version has.
    auto removal = prepare_removal(*store, "gpt", "100");
    REQUIRE(removal.is_ok());
    REQUIRE(commit_change(*store, *removal).is_ok());
    auto b = prepare(*store, ckpt);
    REQUIRE(b.is_ok());
    REQUIRE(commit_change(*store, *b).is_ok());
    drawn = store->snapshot()->steps.at({"gpt", "100"})->origin();
    CHECK(drawn.size() == 32);
    CHECK(drawn != "tx-cluster-7");
  }
  auto store = open_store(data);
  CHECK(store->snapshot()->steps.at({"gpt", "100"})->origin() == drawn);
}
