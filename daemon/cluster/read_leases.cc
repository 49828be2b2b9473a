#include "daemon/cluster/read_leases.h"

#include <algorithm>

namespace ptcfs {

void ReadLeases::touch(std::shared_ptr<const StepVersion> v, Clock::time_point now) { hold(std::move(v), grace_, now); }

void ReadLeases::hold(std::shared_ptr<const StepVersion> v, Clock::duration d, Clock::time_point now) {
  if (!v) return;
  std::lock_guard lock(mu_);
  auto [it, fresh] = held_.try_emplace(v->serial(), nullptr, now + d);
  auto& [held, until] = it->second;
  held = std::move(v);
  if (!fresh) until = std::max(until, now + d);
}

size_t ReadLeases::expire(Clock::time_point now) {
  std::map<uint64_t, std::pair<std::shared_ptr<const StepVersion>, Clock::time_point>> gone;
  std::lock_guard lock(mu_);
  for (auto it = held_.begin(); it != held_.end();) {
    if (now >= it->second.second) {
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
