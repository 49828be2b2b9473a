// A thread that runs a task every period and, in between, whenever its Signal is raised;
// the node's periodic work (expiry, garbage collection, retries) and its save committer
// (daemon/node.h) are tickers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ptcfs {

// What wakes a ticker before its period ends. Made before the parts that raise it (the save
// service is built before the runner its ticker calls), so no ticker is wired after construction.
// A raise is taken by the first of its tickers to wake (give tickers that must each run their own
// signal); destroying a ticker stops only itself.
// Thread-safety: raise() may be called from any thread and does not block on the task.
class Signal {
 public:
  void raise();

 private:
  friend class Ticker;
  std::mutex mu_;
  std::condition_variable cv_;
  bool raised_ = false;
};

class Ticker {
 public:
  // Calls task(tick) on its own thread every `period` (tick counts periods from 1) and when
  // `signal` is raised (tick unchanged). The task runs alone: a raise during a run runs it
  // once more after. `signal` must outlive the ticker.
  Ticker(Signal& signal, std::chrono::milliseconds period, std::function<void(unsigned tick)> task);
  // Stops: waits for a running task to end; no task runs after.
  ~Ticker();
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

 private:
  void run();

  Signal& signal_;
  const std::chrono::milliseconds period_;
  const std::function<void(unsigned)> task_;
  bool stopping_ = false;  // guarded by signal_.mu_
  std::thread thread_;
};

}  // namespace ptcfs
