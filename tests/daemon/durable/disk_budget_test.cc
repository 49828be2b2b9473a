// The disk budget's bookkeeping (daemon/durable/disk_budget.h) without S3: the record of an evicted
// blob no version uses is dropped, but not while the blob is pending (a catch-up's restore, not
// committed yet: its version is published before its blobs settle).
#include "daemon/durable/disk_budget.h"

#include <catch2/catch.hpp>

#include "daemon/store/store.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;
using namespace ptcfs::durable;

TEST_CASE("an evicted blob's record stays while the blob is pending, and goes once no version uses it",
          "[disk_budget]") {
  testing::TempDir tmp;
  auto store = testing::open_store(tmp.path() + "/data");
  auto id = store->blobs().create_evicted(10);
  REQUIRE(id.is_ok());
  WriteBatch b;
  b.put(evicted_key(*id), evicted_json(EvictedBlob{*id, 10, 7, {{0, 10, "j/1/tp0-pp0.safetensors", 0}}}));
  REQUIRE(store->write_meta(b).is_ok());
  DiskBudget budget(*store, nullptr, 0);
  const auto never = [](const StepVersion&) { return false; };
  budget.pass(never, {});
  CHECK(store->blobs().is_evicted(*id));
  CHECK(store->read_meta(evicted_key(*id))->has_value());
  store->blobs().settle(*id);  // never committed: no version uses it
  budget.pass(never, {});
  CHECK_FALSE(store->blobs().is_evicted(*id));
  CHECK_FALSE(store->read_meta(evicted_key(*id))->has_value());
}
