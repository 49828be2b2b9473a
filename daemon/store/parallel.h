// The daemon's worker-pool loop (import copies rank files, compaction copies slices, a cluster
// prepare pulls chunks from peers, a save's commit hashes its slices, a DCP import copies its
// files; PeerClient and GPU uploads keep pools of their own): items [0, n) go one at a time to
// the next free thread. It sits at the bottom of daemon/ so that every layer can use it.
#pragma once

#include <cstddef>
#include <functional>

#include "ptc/base/status.h"

namespace ptcfs {

// A thread's worker: does item i.
using Worker = std::function<Status(size_t i)>;

// Runs items [0, n) on min(n, threads) threads (threads 0: one per core). `make_worker()`
// runs once on each thread, before its first item, and returns that thread's worker, so each
// thread owns its buffers. After the first error no new item starts; returns that error.
Status parallel_for(size_t n, unsigned threads, const std::function<Worker()>& make_worker);

}  // namespace ptcfs
