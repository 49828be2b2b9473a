#include "daemon/cluster/record_ledger.h"

namespace ptcfs {

std::string RecordMark::what() const {
  const std::string kind = step ? "step " : "dataset ";
  if (removed) return "removed " + kind + job + "/" + name;
  return kind + job + "/" + name + " version " + std::to_string(version);
}

bool RecordMark::replaces(const ServedVersion& have) const {
  return step && !removed && have.version == version && !tx.empty() && !have.origin.empty() && tx != have.origin;
}

bool RecordMark::lags(const ServedVersion& have) const {
  if (removed) return step && have.version != 0;
  if (!step) return have.version != 0 && have.version < version;
  return have.version < version || replaces(have);
}

RecordMark mark_of(const KeyedRecord& record) {
  return {record.job, record.name, record.is_step(), record.version(), record.removed(), record.tx()};
}

void RecordLedger::note(const KeyedRecord& record) {
  RecordMark m = mark_of(record);
  std::lock_guard lock(mu_);
  newest_[record.key] = std::move(m);  // the watch delivers a key's records in etcd's order
}

std::vector<RecordMark> RecordLedger::behind(const Served& served) const {
  std::vector<RecordMark> marks;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, m] : newest_) marks.push_back(m);
  }
  std::vector<RecordMark> out;
  for (auto& m : marks)
    if (m.lags(served(m))) out.push_back(std::move(m));
  return out;
}

}  // namespace ptcfs
