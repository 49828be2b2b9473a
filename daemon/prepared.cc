#include "daemon/prepared.h"

#include "daemon/file_util.h"
#include "ptc/log.h"

namespace ptcfs {
namespace {
void release(Store& store, const PreparedChange& c) {
  if (!c.next) return;
  if (c.replaced) store.end_change(c.next->job(), c.next->step());
  else store.release_name(c.next->job(), c.next->step());
}
}  // namespace

ptc::Status commit_change(Store& store, PreparedChange& c) {
  if (!c.blobs.empty()) {
    if (auto s = sync_dir(store.blobs().dir()); !s) {
      abort_change(store, c);
      return s;
    }
  }
  if (auto s = store.commit(c.next, c.replaced); !s) {
    abort_change(store, c);
    return s;
  }
  for (uint64_t id : c.blobs) store.blobs().settle(id);  // the commit settled those the version uses
  release(store, c);
  c.blobs.clear();
  return ptc::Status::ok();
}

void abort_blobs(Store& store, PreparedChange& c) {
  for (uint64_t id : c.blobs) {
    if (auto s = store.blobs().remove(id); !s) ptc::log::warn("removing blob of an aborted change: {}", s.to_string());
    store.blobs().settle(id);
  }
  c.blobs.clear();
}

void abort_change(Store& store, PreparedChange& c) {
  abort_blobs(store, c);
  release(store, c);
}

}  // namespace ptcfs
