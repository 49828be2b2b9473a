// Scratch blocks come back to the pool when their last owner lets go, and serve any request
// they are large enough for; blocks in use are never handed out twice.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "fs/scratch_pool.h"

using namespace ptcfs::fs;

TEST_CASE("a scratch block is reused once let go, never while held", "[scratch_pool]") {
  // 7 MiB: a size no other test of this program asks for, so the block found is this one.
  const size_t size = (7 << 20) - 3;
  auto a = scratch(size);
  std::byte* block = a.get();
  std::memset(block, 1, size);
  auto held = a;  // two owners
  a.reset();
  auto b = scratch(size);
  CHECK(b.get() != block);  // still held
  std::memset(b.get(), 2, size);
  CHECK(static_cast<int>(held[size - 1]) == 1);  // the two do not overlap
  held.reset();
  b.reset();
  // Both are back: the next two requests of that size get exactly those two blocks.
  auto c = scratch(size), d = scratch(size - 1000);
  CHECK(std::set<std::byte*>{c.get(), d.get()}.count(block) == 1);
  CHECK(c.get() != d.get());
}

TEST_CASE("threads taking and letting go never share a block", "[scratch_pool]") {
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &bad] {
      for (int i = 0; i < 2000; ++i) {
        auto s = scratch(static_cast<size_t>(1 + (i * 7919 + t) % (2 << 20)));
        const auto mark = static_cast<std::byte>(t + 1);
        s[0] = mark;
        std::this_thread::yield();
        if (s[0] != mark) ++bad[static_cast<size_t>(t)];
      }
    });
  for (auto& th : threads) th.join();
  CHECK(bad == std::vector<int>(4, 0));
}
