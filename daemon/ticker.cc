#include "daemon/ticker.h"

namespace ptcfs {

void Signal::raise() {
  {
    std::lock_guard lock(mu_);
    raised_ = true;
  }
  cv_.notify_all();
}

Ticker::Ticker(Signal& signal, std::chrono::milliseconds period, std::function<void(unsigned tick)> task)
    : signal_(signal), period_(period), task_(std::move(task)), thread_([this] { run(); }) {}

Ticker::~Ticker() {
  {
    std::lock_guard lock(signal_.mu_);
    stopping_ = true;
  }
  signal_.cv_.notify_all();
  thread_.join();
}

void Ticker::run() {
  unsigned tick = 0;
  auto next = std::chrono::steady_clock::now() + period_;
  std::unique_lock lock(signal_.mu_);
  while (true) {
    signal_.cv_.wait_until(lock, next, [&] { return stopping_ || signal_.raised_; });
    if (stopping_) return;
    if (const auto now = std::chrono::steady_clock::now(); now >= next) {
      ++tick;
      next = now + period_;
    }
    signal_.raised_ = false;
    lock.unlock();
    task_(tick);
    lock.lock();
  }
}

}  // namespace ptcfs
