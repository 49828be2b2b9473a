// The local store's own rules, with real RocksDB and real blob files in a temporary directory:
// Store::open collects blob files no step refers to, and metadata scans (imports, which make
// the steps these cases start from, are tests/daemon/reshard/importer_test.cc).
#include "daemon/store/store.h"

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

#include "daemon/reshard/importer.h"
#include "daemon/store/memory_kv.h"
#include "ptc/formats/safetensors.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;
using namespace ptcfs::testing;
namespace stdfs = std::filesystem;

TEST_CASE("Store::open removes blob files no step refers to", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data", ckpt = tmp.path() + "/ckpt";
  const SliceBytes want = write_checkpoint(ckpt, kPtcJson);
  std::set<std::string> kept;
  {
    auto store = open_store(data);
    REQUIRE(import_checkpoint(*store, ckpt, "gpt", "100").is_ok());
    kept = blob_files(data);
    REQUIRE(kept.size() == 4);
  }
  // As left by an import that crashed before its commit.
  write_file(data + "/blobs/00000000deadbeef", "half a blob");
  write_file(data + "/blobs/ffffffffffffffff", "");
  REQUIRE(blob_files(data).size() == 6);

  auto store = open_store(data);
  CHECK(blob_files(data) == kept);
  check_step(*store, "gpt", "100", want);
}

TEST_CASE("Store::open on an empty data directory removes every blob file", "[store]") {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  stdfs::create_directories(data + "/blobs");
  write_file(data + "/blobs/0123456789abcdef", "orphan");
  auto store = open_store(data);
  CHECK(blob_files(data).empty());
  CHECK(store->snapshot()->steps.empty());
}

TEST_CASE("a metadata scan stops at its callback's first error and returns it", "[kv]") {
  ptcfs::testing::TempDir tmp;
  auto rocks = ptcfs::open_rocksdb(tmp.path() + "/meta");
  REQUIRE(rocks.is_ok());
  ptcfs::MemoryKv memory;
  for (ptcfs::KvStore* kv : {static_cast<ptcfs::KvStore*>(rocks->get()), static_cast<ptcfs::KvStore*>(&memory)}) {
    ptcfs::WriteBatch b;
    b.put("p/a", "1");
    b.put("p/b", "2");
    b.put("p/c", "3");
    b.put("q/a", "4");
    REQUIRE(kv->write(b).is_ok());
    std::vector<std::string> seen;
    const auto st = kv->scan("p/", [&](std::string_view key, std::string_view) -> Status {
      seen.emplace_back(key);
      return key == "p/b" ? corrupt("stop at b") : Status::ok();
    });
    CHECK(st.code() == Code::kCorrupt);
    CHECK(st.message() == "stop at b");
    CHECK(seen == std::vector<std::string>{"p/a", "p/b"});
  }
  // RocksDB's scan reads a snapshot: a record written from the callback is not seen.
  std::vector<std::string> seen;
  REQUIRE(rocks.value()
              ->scan("p/",
                     [&](std::string_view key, std::string_view) {
                       seen.emplace_back(key);
                       ptcfs::WriteBatch b;
                       b.put("p/bb", "new");
                       return rocks.value()->write(b);
                     })
              .is_ok());
  CHECK(seen == std::vector<std::string>{"p/a", "p/b", "p/c"});
}
