// WriterGate (daemon/save/writer_gate.h): one writer at a time of a file written whole, any
// number of a tensor file; the owner's close and the release that follows it; a write after a
// close voids it. Each case drives the gate as the FUSE operations of a save do (open, write,
// flush, release), under its step's lock.
#include "daemon/save/writer_gate.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace ptcfs;

namespace {

struct Step {
  Mutex mu;
  std::condition_variable_any released;
  Result<uint64_t> open(WriterGate& g, std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    MutexLock lock(mu);
    return g.open(lock, released, wait, "busy");
  }
};

}  // namespace

TEST_CASE("a tensor file takes any number of writers, each with its own id", "[save]") {
  Step s;
  WriterGate g(false);
  auto a = s.open(g), b = s.open(g);
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  CHECK(*a == 1);
  CHECK(*b == 2);
  CHECK(g.writers() == 2);
  CHECK(g.owner() == 0);
  bool reopened = true;
  CHECK(g.write(*a, "f", reopened).is_ok());
  CHECK_FALSE(reopened);
  CHECK(g.write(*b, "f", reopened).is_ok());
  CHECK(g.truncate(*b, "f").is_ok());
  CHECK_FALSE(g.release(*a, s.released));
  CHECK(g.release(*b, s.released));  // the last handle
  CHECK(g.writers() == 0);
}

TEST_CASE("a file written whole has one owner; another open or write is refused", "[save]") {
  Step s;
  WriterGate g(true);
  auto a = s.open(g);
  REQUIRE(a.is_ok());
  CHECK(g.owner() == *a);
  auto b = s.open(g);  // the owner still writes: refused at once
  REQUIRE_FALSE(b.is_ok());
  CHECK(b.status().code() == Code::kFailedPrecondition);
  CHECK(b.status().message() == "busy");
  bool reopened = false;
  CHECK(g.write(*a, "f", reopened).is_ok());
  const Status other = g.write(*a + 1, "f", reopened);
  CHECK(other.code() == Code::kFailedPrecondition);
  CHECK(other.message() == "f is open for writing by another writer");
  CHECK(g.truncate(*a + 1, "f").code() == Code::kFailedPrecondition);
  CHECK(g.truncate(*a, "f").is_ok());
  CHECK(g.release(*a, s.released));
  CHECK(g.owner() == 0);
  CHECK(g.truncate(99, "f").is_ok());  // by path, while nobody has it
  auto c = s.open(g);
  REQUIRE(c.is_ok());
  CHECK(*c == 2);
  CHECK(g.owner() == 2);
}

TEST_CASE("an open after the owner's close waits for its release; a write voids the close", "[save]") {
  Step s;
  WriterGate g(true);
  auto a = s.open(g);
  REQUIRE(a.is_ok());
  g.closed(*a);  // flushed: the release is on its way
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    MutexLock lock(s.mu);
    g.release(*a, s.released);
  });
  auto b = s.open(g, std::chrono::seconds(30));  // returns when the release comes, not after 30 s
  late.join();
  REQUIRE(b.is_ok());
  CHECK(g.owner() == *b);

  // The owner closes a copy of its descriptor (a child's exit) and writes on: the close is void,
  // and another open is refused at once again.
  g.closed(*b);
  bool reopened = false;
  CHECK(g.write(*b, "f", reopened).is_ok());
  CHECK(reopened);
  CHECK(g.write(*b, "f", reopened).is_ok());
  CHECK_FALSE(reopened);
  auto c = s.open(g, std::chrono::seconds(30));
  REQUIRE_FALSE(c.is_ok());
  CHECK(c.status().message() == "busy");
}
