// A mutex whose lock rules the compiler checks: clang's thread-safety analysis
// (-Wthread-safety, run over the annotated code by tests/tools/check_thread_safety.py in
// `make test`) proves that every PTC_GUARDED_BY member is used with its mutex held and every
// PTC_REQUIRES function is called with it. Other compilers see plain std::mutex code.
//
//   mutable Mutex mu;
//   int n PTC_GUARDED_BY(mu) = 0;
//   void bump() PTC_REQUIRES(mu) { ++n; }
//   { MutexLock lock(mu); bump(); }
//
// A condition variable waits on a MutexLock (std::condition_variable_any): the analysis
// takes the mutex as held across the wait, which is what the code after it may assume.
#pragma once

#include <mutex>

#if defined(__clang__)
#define PTC_TSA(x) __attribute__((x))
#else
#define PTC_TSA(x)
#endif

#define PTC_CAPABILITY(x) PTC_TSA(capability(x))
#define PTC_SCOPED_CAPABILITY PTC_TSA(scoped_lockable)
#define PTC_GUARDED_BY(x) PTC_TSA(guarded_by(x))
#define PTC_PT_GUARDED_BY(x) PTC_TSA(pt_guarded_by(x))
#define PTC_REQUIRES(...) PTC_TSA(requires_capability(__VA_ARGS__))
#define PTC_ACQUIRE(...) PTC_TSA(acquire_capability(__VA_ARGS__))
#define PTC_RELEASE(...) PTC_TSA(release_capability(__VA_ARGS__))
#define PTC_EXCLUDES(...) PTC_TSA(locks_excluded(__VA_ARGS__))
#define PTC_ASSERT_CAPABILITY(x) PTC_TSA(assert_capability(x))
#define PTC_NO_THREAD_SAFETY_ANALYSIS PTC_TSA(no_thread_safety_analysis)

namespace ptcfs {

class PTC_CAPABILITY("mutex") Mutex {
 public:
  void lock() PTC_ACQUIRE() { m_.lock(); }
  void unlock() PTC_RELEASE() { m_.unlock(); }

 private:
  std::mutex m_;
};

// Holds a Mutex for its scope. lock() and unlock() let a condition_variable_any wait on it.
class PTC_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& m) PTC_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~MutexLock() PTC_RELEASE() { m_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // For std::condition_variable_any only: it unlocks while it waits and locks again before
  // it returns, so the scope holds the mutex whenever its own code runs.
  void lock() PTC_NO_THREAD_SAFETY_ANALYSIS { m_.lock(); }
  void unlock() PTC_NO_THREAD_SAFETY_ANALYSIS { m_.unlock(); }

 private:
  Mutex& m_;
};

}  // namespace ptcfs
