// Claims (Store::claim) and the prepared change that holds them (daemon/store/prepared.h):
// names are released when their holder goes, a change destroyed undecided aborts itself,
// a moved-from change does nothing, and a kept one leaves its blobs to its record.
#include <catch2/catch.hpp>

#include <string>

#include "daemon/reshard/importer.h"
#include "daemon/store/prepared.h"
#include "daemon/store/prepared_record.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;
using namespace ptcfs::testing;

namespace {

Result<PreparedChange> prepare(Store& store, const std::string& ckpt, const std::string& step = "100") {
  ImportSummary sum;
  return prepare_import(
      store, ckpt, "gpt", step, [](const ptc::Layout&) { return Result<StepPlacement>(StepPlacement{}); }, sum);
}

}  // namespace

TEST_CASE("a claim holds its name until it is released, moved on or destroyed", "[claim]") {
  TempDir tmp;
  auto store = open_store(tmp.path() + "/data");
  {
    auto a = store->claim(Claim::kNewStep, "gpt", "100");
    REQUIRE(a.is_ok());
    auto again = store->claim(Claim::kNewStep, "gpt", "100");
    CHECK(again.status().code() == Code::kAlreadyExists);
    CHECK(again.status().message() == "step gpt/100 is being imported");
    // The kinds are separate: a change of a step and a new dataset of the same name are others.
    CHECK(store->claim(Claim::kChangeStep, "gpt", "100").is_ok());
    CHECK(store->claim(Claim::kNewDataset, "gpt", "100").is_ok());

    Claim moved = std::move(a).value();
    CHECK(moved);
    Claim to(std::move(moved));
    CHECK_FALSE(moved);  // NOLINT(bugprone-use-after-move): a moved-from claim holds nothing
    CHECK(store->claim(Claim::kNewStep, "gpt", "100").status().code() == Code::kAlreadyExists);
    to.release();
    CHECK_FALSE(to);
    auto b = store->claim(Claim::kNewStep, "gpt", "100");
    REQUIRE(b.is_ok());
    Claim other = std::move(store->claim(Claim::kNewStep, "gpt", "101")).value();
    other = std::move(b).value();  // releases gpt/101
    CHECK(store->claim(Claim::kNewStep, "gpt", "101").is_ok());
  }
  CHECK(store->claim(Claim::kNewStep, "gpt", "100").is_ok());  // every claim went with its scope

  auto c = store->claim(Claim::kChangeStep, "gpt", "100");
  REQUIRE(c.is_ok());
  auto busy = store->claim(Claim::kChangeStep, "gpt", "100");
  CHECK(busy.status().code() == Code::kFailedPrecondition);
  CHECK(busy.status().message() == "step gpt/100 is already being repartitioned");
  auto d = store->claim(Claim::kNewDataset, "gpt", "text");
  REQUIRE(d.is_ok());
  CHECK(store->claim(Claim::kNewDataset, "gpt", "text").status().message() == "dataset gpt/text is being added");
}

TEST_CASE("the claim of a new step is the name gate", "[claim]") {
  TempDir tmp;
  auto store = open_store(tmp.path() + "/data");
  auto data = store->claim(Claim::kNewStep, "gpt", "data");
  CHECK(data.status().code() == Code::kInvalidArgument);
  CHECK(data.status().message() == "step name 'data' is reserved: MNT/<job>/data holds the job's datasets");
  CHECK(store->claim(Claim::kNewStep, "gpt", "a/b").status().code() == Code::kInvalidArgument);
  CHECK(store->claim(Claim::kNewStep, "", "100").status().code() == Code::kInvalidArgument);
  // Only new steps pass the gate: a dataset may be called "data".
  CHECK(store->claim(Claim::kNewDataset, "gpt", "data").is_ok());
}

TEST_CASE("a prepared change destroyed undecided aborts itself; a moved-from one does nothing", "[claim]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  const auto want = write_checkpoint(ckpt, kPtcJson);
  auto store = open_store(data);
  const auto before = blob_files(data);
  {
    auto change = prepare(*store, ckpt);
    REQUIRE(change.is_ok());
    CHECK(blob_files(data) != before);
    CHECK(store->claim(Claim::kNewStep, "gpt", "100").status().code() == Code::kAlreadyExists);
  }
  CHECK(blob_files(data) == before);                           // its blobs went
  CHECK(store->claim(Claim::kNewStep, "gpt", "100").is_ok());  // and its name is free

  PreparedChange held;
  {
    auto change = prepare(*store, ckpt);
    REQUIRE(change.is_ok());
    PreparedChange moved(std::move(change).value());
    held = std::move(moved);  // `moved` and the result's change are moved from: they do nothing
  }
  CHECK(blob_files(data) != before);
  REQUIRE(commit_change(*store, held).is_ok());
  check_step(*store, "gpt", "100", want);
  {
    PreparedChange done = std::move(held);  // committed: nothing left to abort
  }
  check_step(*store, "gpt", "100", want);

  // Assigning over a prepared change aborts what it held.
  auto first = prepare(*store, ckpt, "200");
  REQUIRE(first.is_ok());
  PreparedChange slot = std::move(first).value();
  const auto with_first = blob_files(data);
  slot = PreparedChange{};
  CHECK(blob_files(data).size() < with_first.size());
  CHECK(store->claim(Claim::kNewStep, "gpt", "200").is_ok());
}

TEST_CASE("a kept change destroyed undecided leaves its blobs to its record", "[claim]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  const auto want = write_checkpoint(ckpt, kPtcJson);
  std::set<std::string> with_change;
  {
    auto store = open_store(data);
    auto change = prepare(*store, ckpt);
    REQUIRE(change.is_ok());
    REQUIRE(keep_prepared(*store, "tx1", *change, nlohmann::json::object()).is_ok());
    with_change = blob_files(data);
    change = internal("the daemon stops");  // the change goes undecided
    CHECK(blob_files(data) == with_change);
  }
  auto store = open_store(data);
  CHECK(blob_files(data) == with_change);
  auto kept = restore_prepared(*store);
  REQUIRE(kept.size() == 1);
  REQUIRE(commit_change(*store, kept[0].change).is_ok());
  forget_prepared(*store, "tx1");
  check_step(*store, "gpt", "100", want);
}
