#include "daemon/save/writer_gate.h"

namespace ptcfs {

namespace {
ptc::Status busy(const std::string& why) { return ptc::error(ptc::Code::kFailedPrecondition, why); }
}  // namespace

ptc::Result<uint64_t> WriterGate::open(std::unique_lock<std::mutex>& lock, std::condition_variable& released,
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

ptc::Status WriterGate::write(uint64_t writer, const std::string& where, bool& reopened) {
  reopened = false;
  if (!whole_) return ptc::Status::ok();
  if (writer != owner_) return busy(where + " is open for writing by another writer");
  if (owner_closed_) {
    owner_closed_ = false;
    reopened = true;
  }
  return ptc::Status::ok();
}

ptc::Status WriterGate::truncate(uint64_t writer, const std::string& where) const {
  if (whole_ && owner_ != 0 && writer != owner_) return busy(where + " is open for writing by another writer");
  return ptc::Status::ok();
}

void WriterGate::closed(uint64_t writer) {
  if (whole_ && writer == owner_) owner_closed_ = true;
}

bool WriterGate::release(uint64_t writer, std::condition_variable& released) {
  if (whole_ && writer == owner_) {
    owner_ = 0;
    released.notify_all();
  }
  return --writers_ == 0;
}

}  // namespace ptcfs
