#include "transport/etcd_lease.h"

#include <algorithm>

namespace ptcfs::transport {

std::chrono::milliseconds LeaseKeeper::period(int64_t ttl_s) {
  return std::chrono::milliseconds(std::max<int64_t>(ttl_s * 1000 / 3, 200));
}

std::chrono::milliseconds LeaseKeeper::lost_after(int64_t ttl_s) { return std::chrono::milliseconds(ttl_s * 500); }

LeaseKeeper::LeaseKeeper(EtcdClient& etcd, int64_t ttl_s, Hooks hooks)
    : etcd_(etcd), ttl_s_(ttl_s), hooks_(std::move(hooks)) {
  thread_ = std::thread([this] { loop(); });
}

void LeaseKeeper::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void LeaseKeeper::loop() {
  const auto every = period(ttl_s_);
  const auto limit = lost_after(ttl_s_);
  auto last_ok = std::chrono::steady_clock::now();
  bool reported = false;
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, every, [this] { return stopping_; })) {
    lock.unlock();
    auto r = etcd_.keep_alive(hooks_.lease());
    Status s = r.status();
    bool gone = !r && s.code() == Code::kNotFound;
    if (gone && hooks_.expired) {
      s = hooks_.expired();
      gone = false;  // replaced, or lost once half the TTL passed without a renewal
    }
    const auto now = std::chrono::steady_clock::now();
    bool go_on = true;
    if (s) {
      last_ok = now;
      reported = false;
      if (hooks_.renewed) hooks_.renewed();
    } else if ((gone || now - last_ok > limit) && !reported) {
      reported = true;
      go_on = hooks_.lost(s);
    }
    lock.lock();
    if (!go_on) return;
  }
}

}  // namespace ptcfs::transport
