#include "daemon/save/writer_gate.h"

namespace ptcfs {

namespace {
Status busy(const std::string& why) { return error(Code::kFailedPrecondition, why); }
}  // namespace

Result<uint64_t> WriterGate::open(MutexLock& lock, std::condition_variable_any& released,
                                  std::chrono::milliseconds wait, const std::string& busy_text) {
  if (whole_ && owner_ != 0) {
    // Closed by its writer, its release still on the way: wait for it. Open elsewhere (still
    // written, or only a forked copy of its descriptor was closed): refused.
    released.wait_for(lock, wait, [&] { return owner_ == 0 || !owner_closed_; });
    if (owner_ != 0) return busy(busy_text);
  }
  ++writers_;
  if (whole_) {
    owner_ = last_ + 1;
    owner_closed_ = false;
  }
  return ++last_;
}

Status WriterGate::write(uint64_t writer, const std::string& where, bool& reopened) {
  reopened = false;
  if (!whole_) return Status::ok();
  if (writer != owner_) return busy(where + " is open for writing by another writer");
  if (owner_closed_) {
    owner_closed_ = false;
    reopened = true;
  }
  return Status::ok();
}

Status WriterGate::truncate(uint64_t writer, const std::string& where) const {
  if (whole_ && owner_ != 0 && writer != owner_) return busy(where + " is open for writing by another writer");
  return Status::ok();
}

void WriterGate::closed(uint64_t writer) {
  if (whole_ && writer == owner_) owner_closed_ = true;
}

bool WriterGate::release(uint64_t writer, std::condition_variable_any& released) {
  if (whole_ && writer == owner_) {
    owner_ = 0;
    released.notify_all();
  }
  return --writers_ == 0;
}

}  // namespace ptcfs
