#include "daemon/store/parallel.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace ptcfs {

Status parallel_for(size_t n, unsigned threads, const std::function<Worker()>& make_worker) {
  if (n == 0) return Status::ok();
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t nthreads = std::min<size_t>(n, threads);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first;
  auto run = [&] {
    Worker work = make_worker();
    for (size_t i; !failed && (i = next.fetch_add(1)) < n;) {
      Status s = work(i);
      if (!s) {
        std::lock_guard lock(mu);
        if (first.is_ok()) first = std::move(s);
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(run);
  run();  // this thread is one of them
  for (auto& t : pool) t.join();
  return first;
}

}  // namespace ptcfs
