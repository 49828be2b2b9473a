#include "daemon/store/prepared.h"

#include <random>

#include <fmt/format.h>

#include "daemon/store/failpoint.h"
#include "daemon/store/file_util.h"
#include "ptc/base/log.h"

namespace ptcfs {
PreparedChange::PreparedChange(PreparedChange&& o) noexcept
    : store(std::exchange(o.store, nullptr)),
      next(std::move(o.next)),
      replaced(std::move(o.replaced)),
      datasets(std::exchange(o.datasets, {})),
      claims(std::exchange(o.claims, {})),
      blobs(std::exchange(o.blobs, {})),
      bytes_received(o.bytes_received),
      removes_step(o.removes_step),
      kept(o.kept) {}

PreparedChange& PreparedChange::operator=(PreparedChange&& o) noexcept {
  if (this != &o) {
    PreparedChange old(std::move(*this));  // aborts when it goes
    store = std::exchange(o.store, nullptr);
    next = std::move(o.next);
    replaced = std::move(o.replaced);
    datasets = std::exchange(o.datasets, {});
    claims = std::exchange(o.claims, {});
    blobs = std::exchange(o.blobs, {});
    bytes_received = o.bytes_received;
    removes_step = o.removes_step;
    kept = o.kept;
  }
  return *this;
}

PreparedChange::~PreparedChange() {
  if (!blobs.empty() && !kept) {
    if (store) {
      log::info("{} is dropped undecided: its new blobs go", describe(*this));
      abort_blobs(*store, *this);
    } else {
      log::error("{} holds {} blobs but names no store: they stay until the next start", describe(*this), blobs.size());
    }
  }
  // The claims release themselves.
}

Status PreparedChange::claim(Store& s, Claim::Kind kind, const std::string& job, const std::string& name) {
  PTC_ASSIGN_OR_RETURN(Claim c, s.claim(kind, job, name));
  store = &s;
  claims.push_back(std::move(c));
  return Status::ok();
}

Status PreparedChange::claim_datasets(Store& s) {
  for (const DatasetChange& d : datasets) {
    if (!d.replaced) continue;  // a new dataset: claimed as kNewDataset
    const std::string& job = d.next->job();
    const std::string& name = d.next->name();
    PTC_RETURN_IF_ERROR(claim(s, Claim::kChangeDataset, job, name));
    const auto snap = s.snapshot();
    const auto it = snap->datasets.find({job, name});
    if (it == snap->datasets.end() || it->second != d.replaced)
      return error(Code::kFailedPrecondition, "dataset " + job + "/" + name +
                                                  " changed while its new version was prepared (from version " +
                                                  std::to_string(d.replaced->version()) + ")");
  }
  return Status::ok();
}

bool PreparedChange::claims_new_dataset() const {
  for (const auto& c : claims)
    if (c.kind() == Claim::kNewDataset) return true;
  return false;
}

Result<PreparedChange> prepare_removal(Store& store, const std::string& job, const std::string& step) {
  auto snap = store.snapshot();
  auto it = snap->steps.find({job, step});
  if (it == snap->steps.end()) return not_found("no step " + job + "/" + step);
  PreparedChange c(store);
  PTC_RETURN_IF_ERROR(c.claim(store, Claim::kChangeStep, job, step));
  c.replaced = it->second;
  c.removes_step = true;
  return c;
}

std::string describe(const PreparedChange& c) {
  if (c.removes_step && c.replaced) return "the removal of step " + c.replaced->job() + "/" + c.replaced->step();
  if (c.next) return "step " + c.next->job() + "/" + c.next->step() + " version " + std::to_string(c.next->version());
  std::string out;
  for (const auto& d : c.datasets)
    out += (out.empty() ? "dataset " : ", ") + d.next->job() + "/" + d.next->name() + " version " +
           std::to_string(d.next->version());
  return out.empty() ? "an empty change" : out;
}

namespace {
// 128 random bits as 32 hex digits: the origin of a version committed by one node alone.
std::string new_origin() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) out += fmt::format("{:08x}", static_cast<uint32_t>(rd()));
  return out;
}
}  // namespace

Status commit_change(Store& store, PreparedChange& c) {
  if (c.next && c.next->origin().empty() && !(c.origin.empty() && c.as_peers))
    c.next->set_origin(c.origin.empty() ? new_origin() : c.origin);
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
  c.blobs.clear();
  c.claims.clear();  // released
  // Blobs only the replaced versions used go as soon as no reader holds them.
  c.replaced.reset();
  for (auto& d : c.datasets) d.replaced.reset();
  if (auto gc = store.collect_garbage(); !gc) log::warn("collecting blobs: {}", gc.status().to_string());
  return Status::ok();
}

void abort_blobs(Store& store, PreparedChange& c) {
  for (uint64_t id : c.blobs) {
    if (auto s = store.blobs().remove(id); !s) log::warn("removing blob of an aborted change: {}", s.to_string());
    store.blobs().settle(id);
  }
  c.blobs.clear();
}

void abort_change(Store& store, PreparedChange& c) {
  abort_blobs(store, c);
  c.claims.clear();  // released
}

}  // namespace ptcfs
