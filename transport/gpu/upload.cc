#include "transport/gpu/upload.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace ptcfs::gpu {

struct ParallelCopy::State {
  std::mutex mu;
  std::condition_variable start, done;
  uint64_t generation = 0;
  unsigned pending = 0;
  bool stop = false;
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  uint64_t len = 0;
  unsigned parts = 1;
  std::vector<std::thread> threads;

  // Share `i` of `parts`, in page multiples so threads do not share pages.
  void share(unsigned i) const {
    const uint64_t per = (len / parts + 4095) & ~uint64_t{4095};
    const uint64_t b = std::min(len, per * i), e = std::min(len, per * (i + 1));
    if (b < e) std::memcpy(dst + b, src + b, e - b);
  }
};

ParallelCopy::ParallelCopy(unsigned threads) : s_(std::make_unique<State>()) {
  s_->parts = threads == 0 ? 1 : threads;
  for (unsigned i = 1; i < s_->parts; ++i)
    s_->threads.emplace_back([st = s_.get(), i] {
      uint64_t seen = 0;
      for (;;) {
        {
          std::unique_lock lock(st->mu);
          st->start.wait(lock, [&] { return st->stop || st->generation != seen; });
          if (st->stop) return;
          seen = st->generation;
        }
        st->share(i);
        std::lock_guard lock(st->mu);
        if (--st->pending == 0) st->done.notify_one();
      }
    });
}

ParallelCopy::~ParallelCopy() {
  {
    std::lock_guard lock(s_->mu);
    s_->stop = true;
  }
  s_->start.notify_all();
  for (auto& t : s_->threads) t.join();
}

void ParallelCopy::copy(std::byte* dst, const std::byte* src, uint64_t len) {
  if (s_->parts == 1 || len < (1u << 20)) {  // below 1 MiB waking threads costs more than it saves
    std::memcpy(dst, src, len);
    return;
  }
  {
    std::lock_guard lock(s_->mu);
    s_->dst = dst;
    s_->src = src;
    s_->len = len;
    s_->pending = s_->parts - 1;
    ++s_->generation;
  }
  s_->start.notify_all();
  s_->share(0);
  std::unique_lock lock(s_->mu);
  s_->done.wait(lock, [&] { return s_->pending == 0; });
}

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace

ptc::Status run_upload(const UploadPlan& plan, std::byte* dst, Device& device, ParallelCopy& copier,
                       UploadTimes* times) {
  UploadTimes t;
  const uint64_t start = now_ns();
  size_t slot = 0, n = 0;
  ptc::Status s = ptc::Status::ok();
  for (const Chunk& c : plan.chunks) {
    ++n;
    if (!c.src) {
      s = device.zero(dst + c.segments[0].dst, c.segments[0].len);
      if (!s) break;
      continue;
    }
    if (c.len > device.slot_bytes()) {
      s = ptc::invalid("upload chunk " + std::to_string(n) + " has " + std::to_string(c.len) +
                       " bytes, a staging slot " + std::to_string(device.slot_bytes()));
      break;
    }
    const uint64_t t0 = now_ns();
    s = device.wait(slot);
    if (!s) break;
    const uint64_t t1 = now_ns();
    std::byte* host = device.staging(slot);
    copier.copy(host, c.src, c.len);
    t.wait_ns += t1 - t0;
    t.stage_ns += now_ns() - t1;
    s = device.copy(slot, c, host, dst)
            .with_context("uploading chunk " + std::to_string(n) + " of " + std::to_string(plan.chunks.size()));
    if (!s) break;
    slot = (slot + 1) % device.slots();
  }
  const uint64_t t2 = now_ns();
  const ptc::Status done = device.finish();  // also after an error: nothing may still read the slots
  t.wait_ns += now_ns() - t2;
  t.total_ns = now_ns() - start;
  if (times) *times = t;
  return s ? done : s;
}

}  // namespace ptcfs::gpu
