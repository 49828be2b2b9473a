// Participant (daemon/cluster/participant.h), this node's half of a two-phase change, driven by
// scripts: each line is one event as a node sees it (its coordinator's prepare, commit or abort;
// a record read in etcd; a lease ending; a restart), in the orders the cluster integration runs
// met them. The part prepared is a real import into a real store (RocksDB, blob files); etcd is
// the scripted map of tests/daemon/cluster/scripted_membership.h. Each script ends by checking
// what the node serves, the transaction's state, and that an undone part left no blob and no
// kept record behind.
#include "daemon/cluster/participant.h"

#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/cluster/etcd_record.h"
#include "daemon/reshard/importer.h"
#include "tests/daemon/cluster/scripted_membership.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/daemon/temp_dir.h"

namespace ptcfs::testing {
namespace {

const std::string kKey = etcd_step_key("job", "1");

// One node: its store (reopened by a restart), its save service and its participant, with etcd.
struct Node {
  explicit Node(const std::string& root) : root(root), ckpt(root + "/ckpt"), data(root + "/data") {
    write_checkpoint(ckpt, kPtcJson);
    open();
    blobs_before = blob_files(data);
  }
  void open() {
    store = open_store(data);
    saves = std::make_unique<SaveService>(*store, nullptr, nullptr);
    parts = std::make_unique<Participant>(*store, members, *saves, "n1");
  }
  // The daemon stops (nothing decided is decided by it) and starts again.
  void restart() {
    preparing.clear();
    parts.reset();
    saves.reset();
    store.reset();
    open();
    parts->restore();
  }
  // This node's part of an import of job/1 coordinated by n0 under lease 7.
  PreparedChange part() {
    ImportSummary sum;
    auto change = prepare_import(
        *store, ckpt, "job", "1", [](const ptc::Layout&) { return Result<StepPlacement>(StepPlacement{}); }, sum);
    INFO(change.status().to_string());
    REQUIRE(change.is_ok());
    return std::move(change).value();
  }
  bool serves() const {
    const auto snap = store->snapshot();
    return snap->steps.count({"job", "1"}) != 0;
  }
  size_t kept_records() const {
    size_t n = 0;
    REQUIRE(store
                ->scan_meta(Store::kPreparedPrefix,
                            [&](std::string_view, std::string_view) {
                              ++n;
                              return Status::ok();
                            })
                .is_ok());
    return n;
  }
  // etcd records the commit of job/1 version 1 by transaction `tx`.
  void record(const std::string& tx) {
    StepRecord r;
    r.kind = "import";
    r.version = 1;
    r.tx = tx;
    r.coordinator = "n0";
    members.write(kKey, to_json(r));
  }

  std::string root, ckpt, data;
  ScriptedMembership members;
  std::unique_ptr<Store> store;
  std::unique_ptr<SaveService> saves;
  std::unique_ptr<Participant> parts;
  std::vector<Participant::Preparing> preparing;  // prepares under way
  std::set<std::string> blobs_before;
};

std::string code_of(const Status& s) {
  if (s.is_ok()) return "ok";
  switch (s.code()) {
    case Code::kAlreadyExists:
      return "exists";
    case Code::kFailedPrecondition:
      return "refused";
    case Code::kNotFound:
      return "unknown";
    default:
      return "error";
  }
}

// Runs one line of a script on `n`; the line's last word after '=' is the answer it expects.
//   begin TX            peer.prepare of TX starts (Participant::begin)
//   fail TX             that prepare fails (its part is never built)
//   prepared TX         that prepare ends with this node's part (an import of job/1)
//   commit TX / abort TX   the coordinator's peer.commit / peer.abort
//   record TX           etcd shows the commit of TX, read by the follower (= yes: committed here)
//   etcd-writes TX      etcd holds the commit of TX (no one has read it yet)
//   superseded TX V     etcd records version V of job/1 by transaction TX ("-": a catch-up to V)
//   removed TX          etcd records the removal of job/1 by TX
//   lease-ends          the lease of n0, the coordinator, ends
//   expire              the periodic expiry (parts older than an hour, or whose lease ended)
//   restart             the daemon stops and starts again
//   static              from now on this node has no lease (etcd is gone: static mode)
void run_line(Node& n, const std::string& line) {
  INFO("line: " << line);
  std::istringstream in(line);
  std::string op, tx, want;
  in >> op;
  std::vector<std::string> words;
  for (std::string w; in >> w;) {
    if (w[0] == '=')
      want = w.substr(1);
    else
      words.push_back(w);
  }
  if (!words.empty()) tx = words[0];
  std::string got;
  if (op == "begin") {
    auto p = n.parts->begin(tx);
    got = code_of(p.status());
    if (p) n.preparing.push_back(std::move(p).value());
  } else if (op == "fail" || op == "prepared") {
    auto it = std::find_if(n.preparing.begin(), n.preparing.end(), [&](const auto& p) { return p.tx() == tx; });
    REQUIRE(it != n.preparing.end());
    Participant::Preparing p = std::move(*it);
    n.preparing.erase(it);
    if (op == "fail") {
      CHECK(n.parts->state(tx) == TxState::kPreparing);
      return;  // p goes: the prepare ended without a part
    }
    got = code_of(n.parts->prepared(std::move(p), n.part(), Participant::Decider{kKey, "n0", 7}));
  } else if (op == "commit" || op == "abort") {
    got = code_of(n.parts->finish(tx, op == "commit", ""));
  } else if (op == "record") {
    got = n.parts->commit_decided(tx) ? "yes" : "no";
  } else if (op == "etcd-writes") {
    n.record(tx);
  } else if (op == "superseded") {
    REQUIRE(words.size() == 2);
    n.parts->drop_superseded(kKey, tx == "-" ? "" : tx, std::stoull(words[1]), false);
  } else if (op == "removed") {
    n.parts->drop_superseded(kKey, tx, 0, true);
  } else if (op == "lease-ends") {
    n.members.leases_ended.insert("n0");
  } else if (op == "expire") {
    got = std::to_string(n.parts->expire(std::chrono::hours(1)));
  } else if (op == "restart") {
    n.restart();
  } else if (op == "static") {
    n.members.current_lease = 0;
  } else {
    FAIL("unknown script line: " << line);
  }
  if (!want.empty()) CHECK(got == want);
}

struct Script {
  const char* what;
  std::vector<std::string> lines;
  TxState end;  // of t1
  bool served;  // job/1 at the end
};

const Script kScripts[] = {
    {"prepare, then commit", {"begin t1 =ok", "prepared t1 =ok", "commit t1 =ok"}, TxState::kCommitted, true},
    {"prepare, then abort", {"begin t1 =ok", "prepared t1 =ok", "abort t1 =ok"}, TxState::kAborted, false},
    {"an abort before the prepare: the prepare is refused",
     {"abort t1 =ok", "begin t1 =refused"},
     TxState::kAborted,
     false},
    {"an abort while preparing: the part is dropped when it is built",
     {"begin t1 =ok", "abort t1 =ok", "prepared t1 =refused", "commit t1 =unknown"},
     TxState::kAborted,
     false},
    {"a record before the prepare: the part commits as soon as it is built",
     {"record t1 =no", "begin t1 =ok", "prepared t1 =ok", "commit t1 =ok", "record t1 =yes"},
     TxState::kCommitted,
     true},
    {"a record while preparing", {"begin t1 =ok", "record t1 =no", "prepared t1 =ok"}, TxState::kCommitted, true},
    {"the record and peer.commit both commit, in either order",
     {"begin t1 =ok", "prepared t1 =ok", "record t1 =yes", "commit t1 =ok", "commit t1 =ok"},
     TxState::kCommitted,
     true},
    {"a second prepare of one transaction is refused while the first runs and after",
     {"begin t1 =ok", "begin t1 =exists", "prepared t1 =ok", "begin t1 =exists", "commit t1 =ok", "begin t1 =exists"},
     TxState::kCommitted,
     true},
    {"a prepare that failed can be asked again",
     {"begin t1 =ok", "fail t1", "begin t1 =ok", "prepared t1 =ok", "commit t1 =ok"},
     TxState::kCommitted,
     true},
    {"a commit of what was never prepared is refused; an abort of it is fine",
     {"commit t1 =unknown", "abort t1 =ok", "abort t1 =ok"},
     TxState::kAborted,
     false},
    {"an abort after the commit changes nothing",
     {"begin t1 =ok", "prepared t1 =ok", "commit t1 =ok", "abort t1 =ok"},
     TxState::kCommitted,
     true},
    {"the record moved past the part (another transaction's version 1)",
     {"begin t1 =ok", "prepared t1 =ok", "superseded t9 1", "commit t1 =unknown"},
     TxState::kAborted,
     false},
    {"an older version recorded by another transaction leaves the part",
     {"begin t1 =ok", "prepared t1 =ok", "superseded t9 0", "commit t1 =ok"},
     TxState::kCommitted,
     true},
    {"its own record does not supersede it",
     {"begin t1 =ok", "prepared t1 =ok", "superseded t1 1"},
     TxState::kPrepared,
     false},
    {"the step removed meanwhile", {"begin t1 =ok", "prepared t1 =ok", "removed t9"}, TxState::kAborted, false},
    {"a catch-up to the version the part makes drops it (the others decided without this node)",
     {"begin t1 =ok", "prepared t1 =ok", "superseded - 1"},
     TxState::kAborted,
     false},
    {"the lease ended and etcd holds no commit: dropped",
     {"begin t1 =ok", "prepared t1 =ok", "expire =0", "lease-ends", "expire =1", "commit t1 =unknown"},
     TxState::kAborted,
     false},
    {"the lease ended after the coordinator committed in etcd: committed here",
     {"begin t1 =ok", "prepared t1 =ok", "etcd-writes t1", "lease-ends", "expire =0"},
     TxState::kCommitted,
     true},
    {"restart after preparing, then the commit",
     {"begin t1 =ok", "prepared t1 =ok", "restart", "commit t1 =ok"},
     TxState::kCommitted,
     true},
    {"restart after preparing, then the record",
     {"begin t1 =ok", "prepared t1 =ok", "restart", "record t1 =yes"},
     TxState::kCommitted,
     true},
    {"restart after preparing, then the abort",
     {"begin t1 =ok", "prepared t1 =ok", "restart", "abort t1 =ok"},
     TxState::kAborted,
     false},
    {"restart after preparing; the coordinator's lease ended undecided",
     {"begin t1 =ok", "prepared t1 =ok", "restart", "lease-ends", "expire =1"},
     TxState::kAborted,
     false},
    {"restart without etcd: nothing decides the kept part",
     {"begin t1 =ok", "prepared t1 =ok", "static", "restart", "commit t1 =unknown"},
     TxState::kUnknown,
     false},
    {"restart while preparing: the prepare is gone",
     {"begin t1 =ok", "restart", "commit t1 =unknown"},
     TxState::kUnknown,
     false},
};

}  // namespace

TEST_CASE("a participant's transaction, script by script", "[participant]") {
  for (const Script& script : kScripts) {
    DYNAMIC_SECTION(script.what) {
      TempDir tmp;
      Node n(tmp.path());
      for (const auto& line : script.lines) run_line(n, line);
      CHECK(to_string(n.parts->state("t1")) == to_string(script.end));
      CHECK(n.serves() == script.served);
      // Decided parts leave no kept record; undone ones no blob either.
      if (script.end != TxState::kPrepared) CHECK(n.kept_records() == 0);
      if (!script.served && script.end != TxState::kPrepared) CHECK(blob_files(n.data) == n.blobs_before);
      if (script.end == TxState::kPrepared) CHECK(n.parts->prepared_count() == 1);
    }
  }
}

TEST_CASE("a prepared part is kept for a restart only when etcd decides it", "[participant]") {
  TempDir tmp;
  Node n(tmp.path());
  run_line(n, "begin t1 =ok");
  run_line(n, "prepared t1 =ok");
  CHECK(n.kept_records() == 1);
  run_line(n, "abort t1 =ok");
  CHECK(n.kept_records() == 0);
  run_line(n, "static");
  run_line(n, "begin t2 =ok");
  REQUIRE(n.parts->prepared(std::move(n.preparing.back()), n.part(), Participant::Decider{kKey, "n0", 0}).is_ok());
  n.preparing.pop_back();
  CHECK(n.kept_records() == 0);
  CHECK(n.parts->state("t2") == TxState::kPrepared);
}

TEST_CASE("a prepare refused by a part held here names that part's coordinator", "[participant]") {
  TempDir tmp;
  Node n(tmp.path());
  for (const char* line : {"begin t1 =ok", "prepared t1 =ok", "commit t1 =ok", "begin t2 =ok"}) run_line(n, line);
  // t2 holds the removal of job/1; a second removal (t3) is refused by the store's claim.
  auto removal = prepare_removal(*n.store, "job", "1");
  REQUIRE(removal.is_ok());
  REQUIRE(n.parts->prepared(std::move(n.preparing.back()), std::move(removal).value(), {kKey, "n0", 7}).is_ok());
  n.preparing.pop_back();
  auto second = prepare_removal(*n.store, "job", "1");
  REQUIRE(!second.is_ok());
  REQUIRE(second.status().code() == Code::kFailedPrecondition);
  const Status why = n.parts->blocked(second.status(), "t3", kKey, "job", false);
  CHECK(why.code() == Code::kFailedPrecondition);
  CHECK_THAT(why.message(), Catch::Contains("the change that node n0 coordinates (transaction t2), not decided yet") &&
                                Catch::Contains("or when its lease ends"));
  // Another record's refusal, and another kind of error, are left as they were.
  CHECK(n.parts->blocked(second.status(), "t3", etcd_step_key("job", "2"), "job", false).message() ==
        second.status().message());
  CHECK(n.parts->blocked(unavailable("x"), "t3", kKey, "job", false).message() == "x");
  // Decided, the removal goes and the step with it.
  REQUIRE(n.parts->finish("t2", true).is_ok());
  CHECK(!n.serves());
}

TEST_CASE("a commit and the record racing commit once; both answer after the step is served", "[participant]") {
  for (int round = 0; round < 20; ++round) {
    TempDir tmp;
    Node n(tmp.path());
    run_line(n, "begin t1 =ok");
    run_line(n, "prepared t1 =ok");
    bool served_at_commit = false, served_at_record = false;
    Status committed;
    bool recorded = false;
    std::thread a([&] {
      committed = n.parts->finish("t1", true);
      served_at_commit = n.serves();
    });
    std::thread b([&] {
      recorded = n.parts->commit_decided("t1");
      served_at_record = n.serves();
    });
    a.join();
    b.join();
    INFO("round " << round);
    CHECK(committed.is_ok());
    CHECK(recorded);
    CHECK(served_at_commit);
    CHECK(served_at_record);
    CHECK(n.parts->state("t1") == TxState::kCommitted);
  }
}

TEST_CASE("a commit that replaced a version hands the replaced one to on_replaced; a removal does not",
          "[participant]") {
  TempDir tmp;
  Node n(tmp.path());
  std::vector<uint64_t> replaced;
  n.parts->on_replaced([&](std::shared_ptr<const StepVersion> v) { replaced.push_back(v->version()); });
  run_line(n, "begin t1 =ok");
  run_line(n, "prepared t1 =ok");
  run_line(n, "commit t1 =ok");
  CHECK(replaced.empty());  // an import replaced nothing

  // Version 2 of job/1: the same layout and slices (what a repartition to the same layout makes).
  const auto v1 = n.store->find_version("job", "1", 1);
  REQUIRE(v1);
  std::vector<std::vector<StoredSlice>> stored;
  for (const auto& sh : v1->layout().shards()) {
    stored.emplace_back();
    if (v1->holds(sh))
      for (size_t i = 0; i < v1->layout().slices(sh).size(); ++i) stored.back().push_back(v1->stored(sh, i));
  }
  PreparedChange change;
  REQUIRE(change.claim(*n.store, Claim::kChangeStep, "job", "1").is_ok());
  change.replaced = v1;
  change.next = n.store->new_version("job", "1", 2, v1->layout(), std::move(stored), v1->placement());
  auto p = n.parts->begin("t2");
  REQUIRE(p.is_ok());
  REQUIRE(n.parts->prepared(std::move(p).value(), std::move(change), Participant::Decider{kKey, "n0", 7}).is_ok());
  REQUIRE(n.parts->finish("t2", true).is_ok());
  CHECK(replaced == std::vector<uint64_t>{1});

  auto removal = prepare_removal(*n.store, "job", "1");
  REQUIRE(removal.is_ok());
  auto q = n.parts->begin("t3");
  REQUIRE(q.is_ok());
  REQUIRE(
      n.parts->prepared(std::move(q).value(), std::move(removal).value(), Participant::Decider{kKey, "n0", 7}).is_ok());
  REQUIRE(n.parts->finish("t3", true).is_ok());
  CHECK(replaced == std::vector<uint64_t>{1});
  CHECK(!n.serves());
}

}  // namespace ptcfs::testing
