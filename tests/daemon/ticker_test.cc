#include "daemon/ticker.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

// Waits up to 10 s for `pred`.
template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 1000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

}  // namespace

TEST_CASE("a raised signal runs the task at once, with the tick unchanged", "[ticker]") {
  ptcfs::Signal signal;
  std::atomic<int> runs{0};
  std::atomic<unsigned> last_tick{99};
  ptcfs::Ticker ticker(signal, std::chrono::hours(1), [&](unsigned tick) {
    last_tick = tick;
    ++runs;
  });
  signal.raise();
  REQUIRE(eventually([&] { return runs.load() == 1; }));
  CHECK(last_tick == 0);  // no period has passed
  signal.raise();
  REQUIRE(eventually([&] { return runs.load() == 2; }));
  CHECK(last_tick == 0);
}

TEST_CASE("the task runs every period with ticks counting from 1", "[ticker]") {
  ptcfs::Signal signal;
  std::mutex mu;
  std::vector<unsigned> ticks;
  {
    ptcfs::Ticker ticker(signal, 20ms, [&](unsigned tick) {
      std::lock_guard lock(mu);
      ticks.push_back(tick);
    });
    REQUIRE(eventually([&] {
      std::lock_guard lock(mu);
      return ticks.size() >= 3;
    }));
  }
  std::lock_guard lock(mu);
  for (size_t i = 0; i < ticks.size(); ++i) CHECK(ticks[i] == i + 1);
}

TEST_CASE("destroying a ticker waits for a running task and runs no more", "[ticker]") {
  ptcfs::Signal signal;
  std::atomic<int> started{0}, finished{0};
  {
    ptcfs::Ticker ticker(signal, std::chrono::hours(1), [&](unsigned) {
      ++started;
      std::this_thread::sleep_for(100ms);
      ++finished;
    });
    signal.raise();
    REQUIRE(eventually([&] { return started.load() == 1; }));
    signal.raise();  // raised during the run: would run once more after it
  }
  CHECK(finished.load() == started.load());  // the destructor waited for the running task
  const int runs = started.load();
  signal.raise();  // nobody listens any more
  std::this_thread::sleep_for(50ms);
  CHECK(started.load() == runs);
}
