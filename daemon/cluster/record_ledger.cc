#include "daemon/cluster/record_ledger.h"

namespace ptcfs {

std::string RecordMark::what() const {
  const std::string kind = step ? "step " : "dataset ";
  if (removed) return "removed " + kind + job + "/" + name;
  return kind + job + "/" + name + " version " + std::to_string(version);
}

void RecordLedger::note(const KeyedRecord& record) {
  RecordMark m{record.job, record.name, record.is_step(), record.version(), record.removed()};
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
  for (auto& m : marks) {
    const uint64_t have = served(m);
    const bool lags = m.removed ? (m.step && have != 0) : (m.step ? have < m.version : have != 0 && have < m.version);
    if (lags) out.push_back(std::move(m));
  }
  return out;
}

}  // namespace ptcfs
