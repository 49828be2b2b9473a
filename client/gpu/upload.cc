#include "client/gpu/upload.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ptcfs::gpu {

struct ParallelCopy::State {
  std::mutex mu;
  std::condition_variable start, done;
  uint64_t generation = 0;
  unsigned pending = 0;
  bool stop = false;
  const std::function<void(uint64_t, uint64_t)>* part = nullptr;
  uint64_t len = 0;
  unsigned parts = 1;
  std::vector<std::thread> threads;

  // Share `i` of `parts`, in page multiples so threads do not share pages.
  void share(unsigned i) const {
    const uint64_t per = (len / parts + 4095) & ~uint64_t{4095};
    const uint64_t b = std::min(len, per * i), e = std::min(len, per * (i + 1));
    if (b < e) (*part)(b, e);
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

void ParallelCopy::split(uint64_t len, const std::function<void(uint64_t, uint64_t)>& part) {
  if (s_->parts == 1 || len < (1u << 20)) {  // below 1 MiB waking threads costs more than it saves
    part(0, len);
    return;
  }
  {
    std::lock_guard lock(s_->mu);
    s_->part = &part;
    s_->len = len;
    s_->pending = s_->parts - 1;
    ++s_->generation;
  }
  s_->start.notify_all();
  s_->share(0);
  std::unique_lock lock(s_->mu);
  s_->done.wait(lock, [&] { return s_->pending == 0; });
}

void ParallelCopy::copy(std::byte* dst, const std::byte* src, uint64_t len) {
  split(len, [&](uint64_t b, uint64_t e) { std::memcpy(dst + b, src + b, e - b); });
}

namespace {

// Reads [off, off + len) of fd into dst, whatever pread returns at a time.
Status pread_all(int fd, std::byte* dst, uint64_t off, uint64_t len) {
  while (len > 0) {
    const ssize_t n = ::pread(fd, dst, std::min<uint64_t>(len, uint64_t{1} << 30), static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("pread of " + std::to_string(len) + " bytes at offset " + std::to_string(off), errno);
    if (n == 0)
      return corrupt("pread at offset " + std::to_string(off) + ": the file ends " + std::to_string(len) +
                     " bytes short");
    dst += n;
    off += static_cast<uint64_t>(n);
    len -= static_cast<uint64_t>(n);
  }
  return Status::ok();
}

}  // namespace

Status ParallelCopy::read(std::byte* dst, int fd, uint64_t off, uint64_t len) {
  std::mutex mu;
  Status first = Status::ok();  // the first share's error
  split(len, [&](uint64_t b, uint64_t e) {
    Status s = pread_all(fd, dst + b, off + b, e - b);
    std::lock_guard lock(mu);
    if (!s && first) first = std::move(s);
  });
  return first;
}

Result<Stage> stage_from_env() {
  const char* env = std::getenv("PTCFS_GPU_STAGE");
  const std::string v = env ? env : "";
  if (v.empty() || v == "pread") return Stage::kPread;
  if (v == "copy") return Stage::kCopy;
  return invalid("PTCFS_GPU_STAGE must be copy or pread, not '" + v + "'");
}

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Stages chunk c into host: a copy from its mapping, or a pread of its source's file.
Status stage(ParallelCopy& copier, std::byte* host, const Chunk& c, const std::vector<SourceFile>& files) {
  if (files.empty()) {
    copier.copy(host, c.src, c.len);
    return Status::ok();
  }
  const std::string what = "reading source " + std::to_string(c.source) + " by pread";
  if (c.source >= files.size()) return internal(what + ": there are " + std::to_string(files.size()) + " sources");
  const SourceFile& f = files[c.source];
  const auto at = reinterpret_cast<uintptr_t>(c.src), base = reinterpret_cast<uintptr_t>(f.base);
  if (at < base || c.len > f.len || at - base > f.len - c.len)
    return internal(what + ": the chunk lies outside the source's mapping");
  return copier.read(host, f.fd, at - base, c.len).with_context(what);
}

}  // namespace

Status run_upload(const UploadPlan& plan, std::byte* dst, Device& device, ParallelCopy& copier, UploadTimes* times,
                  const std::vector<SourceFile>& pread_from) {
  UploadTimes t;
  const uint64_t start = now_ns();
  size_t slot = 0, n = 0;
  Status s = Status::ok();
  for (const Chunk& c : plan.chunks) {
    ++n;
    if (!c.src) {
      s = device.zero(dst + c.segments[0].dst, c.segments[0].len);
      if (!s) break;
      continue;
    }
    if (c.len > device.slot_bytes()) {
      s = invalid("upload chunk " + std::to_string(n) + " has " + std::to_string(c.len) + " bytes, a staging slot " +
                  std::to_string(device.slot_bytes()));
      break;
    }
    const uint64_t t0 = now_ns();
    s = device.wait(slot);
    if (!s) break;
    const uint64_t t1 = now_ns();
    std::byte* host = device.staging(slot);
    s = stage(copier, host, c, pread_from);
    t.wait_ns += t1 - t0;
    t.stage_ns += now_ns() - t1;
    if (!s) {
      s = s.with_context("staging chunk " + std::to_string(n) + " of " + std::to_string(plan.chunks.size()));
      break;
    }
    s = device.copy(slot, c, host, dst)
            .with_context("uploading chunk " + std::to_string(n) + " of " + std::to_string(plan.chunks.size()));
    if (!s) break;
    slot = (slot + 1) % device.slots();
  }
  const uint64_t t2 = now_ns();
  const Status done = device.finish();  // also after an error: nothing may still read the slots
  t.wait_ns += now_ns() - t2;
  t.total_ns = now_ns() - start;
  if (times) *times = t;
  return s ? done : s;
}

}  // namespace ptcfs::gpu
