// BlobStore (daemon/store/blob_store.h): eviction and the refill a read of an evicted blob runs
// first; concurrent readers share one try, and fail with it.
#include "daemon/store/blob_store.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/store/file_util.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;

namespace {

uint64_t write_blob(BlobStore& blobs, const std::string& bytes) {
  auto w = blobs.create();
  REQUIRE(w.is_ok());
  REQUIRE(w->append(bytes.data(), bytes.size()).is_ok());
  REQUIRE(w->finish().is_ok());
  const uint64_t id = w->id();
  blobs.settle(id);
  return id;
}

std::string read_blob(BlobStore& blobs, uint64_t id) {
  auto f = blobs.file(id);
  REQUIRE(f.is_ok());
  std::string out((*f)->size(), '\0');
  REQUIRE(*read_full((*f)->fd(), 0, out.data(), out.size(), "blob") == out.size());
  return out;
}

}  // namespace

TEST_CASE("an evicted blob is gone from disk and fetched back by the next read", "[blob_store]") {
  testing::TempDir tmp;
  auto blobs = BlobStore::open(tmp.path() + "/blobs");
  REQUIRE(blobs.is_ok());
  BlobStore& b = **blobs;
  const std::string bytes = "the bytes of a slice";
  const uint64_t id = write_blob(b, bytes);
  auto held = b.file(id);  // a reader holding it keeps its file
  REQUIRE(held.is_ok());
  REQUIRE(b.evict(id, bytes.size()).is_ok());
  CHECK(b.is_evicted(id));
  CHECK(b.evicted() == std::vector<uint64_t>{id});
  CHECK(*b.size_of(id) == bytes.size());
  auto ids = b.list();
  REQUIRE(ids.is_ok());
  CHECK(ids->empty());
  // No refill: a clear error, not an absent file.
  auto none = b.file(id);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().code() == Code::kUnavailable);
  CHECK(none.status().message().find("evicted to S3") != std::string::npos);
  // A refill that writes the file back (what the S3 tier's does, from the copy).
  std::atomic<int> calls{0};
  b.set_refill(std::make_shared<const BlobStore::Refill>([&](uint64_t which) {
    ++calls;
    std::ofstream(b.path(which)) << bytes;
    return Status::ok();
  }));
  CHECK(read_blob(b, id) == bytes);
  CHECK(read_blob(b, id) == bytes);
  CHECK(calls == 1);
  CHECK_FALSE(b.is_evicted(id));
}

TEST_CASE("readers waiting on a failing refill fail with it rather than each trying again", "[blob_store]") {
  testing::TempDir tmp;
  auto blobs = BlobStore::open(tmp.path() + "/blobs");
  REQUIRE(blobs.is_ok());
  BlobStore& b = **blobs;
  const uint64_t id = write_blob(b, "x");
  REQUIRE(b.evict(id, 1).is_ok());
  std::atomic<int> calls{0};
  b.set_refill(std::make_shared<const BlobStore::Refill>([&](uint64_t) {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return unavailable("S3 does not answer");
  }));
  std::vector<std::thread> readers;
  std::atomic<int> failed{0};
  for (int i = 0; i < 4; ++i)
    readers.emplace_back([&] {
      auto f = b.file(id);
      if (!f.is_ok() && f.status().message() == "S3 does not answer") ++failed;
    });
  for (auto& t : readers) t.join();
  CHECK(failed == 4);
  CHECK(calls < 4);  // the ones that waited for a try took its error (the first may start alone)
  CHECK(b.is_evicted(id));
  // A later read tries again.
  const int before = calls;
  CHECK_FALSE(b.file(id).is_ok());
  CHECK(calls == before + 1);
}

TEST_CASE("a blob created evicted has a fresh id, no file, and stays pending until settled", "[blob_store]") {
  testing::TempDir tmp;
  auto blobs = BlobStore::open(tmp.path() + "/blobs");
  REQUIRE(blobs.is_ok());
  const uint64_t kept = write_blob(**blobs, "abc");
  auto id = (*blobs)->create_evicted(4096);
  REQUIRE(id.is_ok());
  CHECK(*id != kept);
  CHECK(*id != 0);
  CHECK((*blobs)->is_evicted(*id));
  CHECK((*blobs)->is_pending(*id));
  CHECK(*(*blobs)->size_of(*id) == 4096);
  CHECK(*(*blobs)->list() == std::vector<uint64_t>{kept});  // no file
  // Its first read runs the refill, which writes the file.
  (*blobs)->set_refill(std::make_shared<const BlobStore::Refill>([&](uint64_t b) {
    std::ofstream(blobs.value()->path(b), std::ios::binary) << std::string(4096, 'x');
    return Status::ok();
  }));
  CHECK(read_blob(**blobs, *id) == std::string(4096, 'x'));
  CHECK_FALSE((*blobs)->is_evicted(*id));
  (*blobs)->settle(*id);
  CHECK_FALSE((*blobs)->is_pending(*id));
}
