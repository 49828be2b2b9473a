#include "daemon/cluster/read_leases.h"

namespace ptcfs {

void ReadLeases::touch(std::shared_ptr<const StepVersion> v, Clock::time_point now) {
  if (!v) return;
  std::lock_guard lock(mu_);
  auto& [held, last] = held_[v->serial()];
  held = std::move(v);
  last = now;
}

size_t ReadLeases::expire(Clock::time_point now) {
  std::map<uint64_t, std::pair<std::shared_ptr<const StepVersion>, Clock::time_point>> gone;
  std::lock_guard lock(mu_);
  for (auto it = held_.begin(); it != held_.end();) {
    if (now - it->second.second >= grace_) {
      gone.insert(held_.extract(it++));
    } else {
      ++it;
    }
  }
  return held_.size();  // `gone` lets go of its versions after the lock (their blobs may be collected)
}

size_t ReadLeases::size() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

}  // namespace ptcfs
