// The versions this node's peers read lately, held here so that a file opened through another
// node keeps reading its version after a change replaces that version on this node
// (docs/ARCHITECTURE.md "A cluster"): the store keeps a replaced version only while something
// holds it, and the reader's node holds its own copy of the version's layout, not this node's.
// Each peer read of a version holds it `grace` longer; expire() lets go of the others, and
// their blobs are then collected as any replaced version's are. A version this node has just
// replaced is held a short while too (hold()), read or not: a node that was stopped or slow
// through the commit may still serve it, and reads on of a shard it never read here before.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "daemon/store/step_version.h"

namespace ptcfs {

class ReadLeases {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ReadLeases(Clock::duration grace) : grace_(grace) {}

  // A peer read of `v`: held `grace` from now.
  void touch(std::shared_ptr<const StepVersion> v, Clock::time_point now = Clock::now());
  // Held at least `d` from now (and longer when a read holds it longer).
  void hold(std::shared_ptr<const StepVersion> v, Clock::duration d, Clock::time_point now = Clock::now());
  // Lets go of every version not read for `grace`; how many are still held.
  size_t expire(Clock::time_point now = Clock::now());
  size_t size() const;

 private:
  const Clock::duration grace_;
  mutable std::mutex mu_;  // guards held_
  // By serial: the version and when it may be let go.
  std::map<uint64_t, std::pair<std::shared_ptr<const StepVersion>, Clock::time_point>> held_;
};

}  // namespace ptcfs
