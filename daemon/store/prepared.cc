#include "daemon/store/prepared.h"

#include "daemon/store/failpoint.h"
#include "daemon/store/file_util.h"
#include "ptc/base/log.h"

namespace ptcfs {
namespace {
void release(Store& store, PreparedChange& c) {
  for (const auto& [job, name] : c.reserved_datasets) store.release_dataset(job, name);
  c.reserved_datasets.clear();
  if (c.removes_step && c.replaced) store.end_change(c.replaced->job(), c.replaced->step());
  if (!c.next) return;
  if (c.replaced) store.end_change(c.next->job(), c.next->step());
  else store.release_name(c.next->job(), c.next->step());
}
}  // namespace

ptc::Result<PreparedChange> prepare_removal(Store& store, const std::string& job, const std::string& step) {
  auto snap = store.snapshot();
  auto it = snap->steps.find({job, step});
  if (it == snap->steps.end()) return ptc::not_found("no step " + job + "/" + step);
  PTC_RETURN_IF_ERROR(store.begin_change(job, step));
  PreparedChange c;
  c.replaced = it->second;
  c.removes_step = true;
  return c;
}

std::string describe(const PreparedChange& c) {
  if (c.removes_step && c.replaced)
    return "the removal of step " + c.replaced->job() + "/" + c.replaced->step();
  if (c.next) return "step " + c.next->job() + "/" + c.next->step() + " version " + std::to_string(c.next->version());
  std::string out;
  for (const auto& d : c.datasets)
    out += (out.empty() ? "dataset " : ", ") + d.next->job() + "/" + d.next->name() + " version " +
           std::to_string(d.next->version());
  return out.empty() ? "an empty change" : out;
}

ptc::Status commit_change(Store& store, PreparedChange& c) {
  if (!c.blobs.empty()) {
    if (auto s = sync_dir(store.blobs().dir()); !s) {
      abort_change(store, c);
      return s;
    }
  }
  failpoint("commit.before");
  if (auto s = c.removes_step ? store.remove_step(c.replaced) : store.commit(c.next, c.replaced, c.datasets); !s) {
    abort_change(store, c);
    return s;
  }
  failpoint("commit.after");
  for (uint64_t id : c.blobs) store.blobs().settle(id);  // the commit settled those the version uses
  release(store, c);
  c.blobs.clear();
  // Blobs only the replaced versions used go as soon as no reader holds them.
  c.replaced.reset();
  for (auto& d : c.datasets) d.replaced.reset();
  if (auto gc = store.collect_garbage(); !gc) ptc::log::warn("collecting blobs: {}", gc.status().to_string());
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
