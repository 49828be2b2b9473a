// RecordLedger (daemon/cluster/record_ledger.h): which of etcd's records a node is behind on, from
// records decoded as the watch decodes them.
#include "daemon/cluster/record_ledger.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "daemon/cluster/membership.h"
#include "tests/daemon/cluster/record_fixture.h"

using namespace ptcfs;

namespace {

KeyedRecord step_record(const std::string& step, uint64_t version, bool removed = false) {
  return testing::step_record_of("j", step, version, removed);
}

KeyedRecord dataset_record(const std::string& name, uint64_t version) {
  DatasetRecord r;
  r.kind = "dataset_progress";
  r.version = version;
  r.tx = "d" + std::to_string(version);
  r.coordinator = "n1";
  auto k = keyed_record(etcd_dataset_key("j", name), to_json(r));
  REQUIRE(k.is_ok());
  return *k;
}

// What a node serves: "s:<step>" and "d:<dataset>" -> version.
RecordLedger::Served serving(std::map<std::string, uint64_t> have) {
  return [have = std::move(have)](const RecordMark& m) {
    auto it = have.find((m.step ? "s:" : "d:") + m.name);
    return it == have.end() ? uint64_t{0} : it->second;
  };
}

std::vector<std::string> whats(const std::vector<RecordMark>& marks) {
  std::vector<std::string> out;
  for (const auto& m : marks) out.push_back(m.what());
  return out;
}

}  // namespace

TEST_CASE("a node is behind on a step it has at an older version or not at all", "[record_ledger]") {
  RecordLedger ledger;
  ledger.note(step_record("1", 3));
  ledger.note(step_record("2", 1));
  CHECK(whats(ledger.behind(serving({{"s:1", 3}, {"s:2", 1}}))).empty());
  CHECK(whats(ledger.behind(serving({{"s:1", 4}, {"s:2", 1}}))).empty());  // ahead of a record: not behind
  CHECK(whats(ledger.behind(serving({{"s:1", 2}, {"s:2", 1}}))) == std::vector<std::string>{"step j/1 version 3"});
  CHECK(whats(ledger.behind(serving({{"s:1", 3}}))) == std::vector<std::string>{"step j/2 version 1"});
}

TEST_CASE("the newest record of a key counts, removals included", "[record_ledger]") {
  RecordLedger ledger;
  ledger.note(step_record("1", 2));
  ledger.note(step_record("1", 5));
  CHECK(whats(ledger.behind(serving({{"s:1", 2}}))) == std::vector<std::string>{"step j/1 version 5"});
  ledger.note(step_record("1", 0, true));
  CHECK(whats(ledger.behind(serving({{"s:1", 5}}))) == std::vector<std::string>{"removed step j/1"});
  CHECK(whats(ledger.behind(serving({}))).empty());
}

TEST_CASE("a dataset counts only where the node has it", "[record_ledger]") {
  RecordLedger ledger;
  ledger.note(dataset_record("d", 4));
  CHECK(whats(ledger.behind(serving({{"d:d", 3}}))) == std::vector<std::string>{"dataset j/d version 4"});
  CHECK(whats(ledger.behind(serving({{"d:d", 4}}))).empty());
  CHECK(whats(ledger.behind(serving({}))).empty());
  // A step and a dataset of one name are different records.
  ledger.note(step_record("d", 1));
  CHECK(whats(ledger.behind(serving({{"d:d", 4}}))) == std::vector<std::string>{"step j/d version 1"});
}
