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

// What a node serves: "s:<step>" and "d:<dataset>" -> version; a step's origin is the fixture's
// transaction of that version ("t<version>") unless `origins` names another.
RecordLedger::Served serving(std::map<std::string, uint64_t> have, std::map<std::string, std::string> origins = {}) {
  return [have = std::move(have), origins = std::move(origins)](const RecordMark& m) {
    const std::string key = (m.step ? "s:" : "d:") + m.name;
    auto it = have.find(key);
    if (it == have.end()) return ServedVersion{};
    auto o = origins.find(key);
    return ServedVersion{it->second, o != origins.end() ? o->second : m.step ? "t" + std::to_string(it->second) : ""};
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

TEST_CASE("a step of the record's version number and another origin is behind; an unknown origin is not",
          "[record_ledger]") {
  // The step removed and saved again under its name while this node was away: version 1 again.
  RecordLedger ledger;
  ledger.note(step_record("1", 1));  // written by transaction "t1"
  CHECK(whats(ledger.behind(serving({{"s:1", 1}}))).empty());
  CHECK(whats(ledger.behind(serving({{"s:1", 1}}, {{"s:1", "old"}}))) ==
        std::vector<std::string>{"step j/1 version 1"});
  // A version an older ptcfsd committed (no origin) counts as the record's.
  CHECK(whats(ledger.behind(serving({{"s:1", 1}}, {{"s:1", ""}}))).empty());
  // Ahead of the record: not behind, whatever the origin.
  CHECK(whats(ledger.behind(serving({{"s:1", 2}}, {{"s:1", "old"}}))).empty());
  const RecordMark m = mark_of(step_record("1", 1));
  CHECK(m.tx == "t1");
  CHECK(m.replaces(ServedVersion{1, "old"}));
  CHECK_FALSE(m.replaces(ServedVersion{1, "t1"}));
  CHECK_FALSE(m.replaces(ServedVersion{0, ""}));
  // A record with no transaction (a fence written where there was none) names no origin.
  RecordMark fence = m;
  fence.tx.clear();
  CHECK_FALSE(fence.lags(ServedVersion{1, "old"}));
}

TEST_CASE("a dataset's origin does not count", "[record_ledger]") {
  RecordLedger ledger;
  ledger.note(dataset_record("d", 4));  // "d4"
  CHECK(whats(ledger.behind(serving({{"d:d", 4}}, {{"d:d", "other"}}))).empty());
}
