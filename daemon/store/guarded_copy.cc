#include "daemon/store/guarded_copy.h"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

namespace ptcfs {
namespace {

// The jump out of this thread's guarded run; null outside run_guarded. Volatile: the
// handler reads it, so the stores around the copy must not be dropped or moved (the compiler
// knows memcpy does not read it, and without volatile removed the first store).
thread_local sigjmp_buf* volatile t_guard = nullptr;
struct sigaction g_previous;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* guard = t_guard) siglongjmp(*guard, 1);
  // Not ours: put the previous handler back and let the fault happen again under it.
  ::sigaction(SIGBUS, &g_previous, nullptr);
  (void)sig;
  (void)info;
  (void)context;
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    // SA_NODEFER: SIGBUS stays unblocked after the jump, without saving the signal mask on
    // every copy (a system call).
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

}  // namespace

bool run_guarded(void (*fn)(void*), void* ctx) {
  install_once();
  sigjmp_buf guard;
  if (sigsetjmp(guard, 0) != 0) {
    t_guard = nullptr;
    return false;
  }
  t_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  fn(ctx);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
  return true;
}

bool copy_guarded(const CopyRun* runs, size_t n) {
  auto copy = [&] {
    for (size_t i = 0; i < n; ++i) std::memcpy(runs[i].dst, runs[i].src, runs[i].len);
  };
  return run_guarded(copy);
}

}  // namespace ptcfs
