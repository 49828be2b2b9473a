// TwoPhase (daemon/cluster/two_phase.h) against a scripted membership (etcd's decisions, locks
// and records in a map, with etcd going silent and other writers on cue) and scripted peers
// (which node votes no or stops answering): every interleaving of prepare, vote, decide,
// crash and expiry the cluster integration tests cover, in milliseconds.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/cluster/two_phase.h"
#include "tests/daemon/cluster/scripted_membership.h"

namespace ptcfs {
namespace {

using testing::ScriptedMembership;

using nlohmann::json;

class ScriptedPeers final : public ChangePeers {
 public:
  std::map<int, Status> votes_no;   // node -> why it refuses to prepare
  std::set<int> down;               // these answer nothing
  std::map<int, uint64_t> digests;  // node -> its reply's ptc_digest
  std::vector<std::string> log;     // "prepare n1", "commit n0", "abort n2", in order

  std::vector<Result<PrepareReply>> prepare(const std::vector<int>& nodes, const PrepareRequest& req) override {
    std::vector<Result<PrepareReply>> out;
    for (int n : nodes) {
      log.push_back("prepare " + name_of(n));
      last_tx = req.tx;
      if (down.count(n))
        out.push_back(error(Code::kDeadlineExceeded, "node " + name_of(n) + " is silent"));
      else if (votes_no.count(n))
        out.push_back(votes_no[n]);
      else {
        PrepareReply r;
        r.ptc_digest = digests.count(n) ? digests[n] : 1;
        out.push_back(r);
      }
    }
    return out;
  }
  std::vector<Status> finish(const std::vector<int>& nodes, const FinishRequest& req) override {
    std::vector<Status> out;
    last_why = req.why;
    for (int n : nodes) {
      REQUIRE(req.tx == last_tx);
      if (down.count(n)) {
        log.push_back("missed " + std::string(req.commit ? "commit " : "abort ") + name_of(n));
        out.push_back(unavailable("node " + name_of(n) + " is down"));
      } else {
        log.push_back((req.commit ? "commit " : "abort ") + name_of(n));
        out.push_back(Status::ok());
      }
    }
    return out;
  }
  std::string name_of(int node) const override { return "n" + std::to_string(node); }
  std::string last_tx;
  std::string last_why;  // of the last finish: an abort's reason that trying again would not undo
};

const std::string kKey = etcd_step_key("j", "1");

struct Fixture {
  ScriptedMembership members;
  ScriptedPeers peers;
  TwoPhase two_phase{peers, members, 0, "n0", std::chrono::milliseconds(0)};

  ChangeSpec import_spec() {
    ChangeSpec spec;
    spec.what = "import of j/1";
    spec.nodes = members.members();
    spec.request = two_phase.request(ImportChange{"/in", "j", "1", {"n0", "n1", "n2"}, {}});
    spec.record = step_record("import", 1, {"n0", "n1", "n2"});
    return spec;
  }
  // Runs an import of j/1 under the key's lock, released when it returns.
  Result<TwoPhase::Prepared> run(ChangeSpec spec) {
    auto locked = two_phase.lock(kKey);
    REQUIRE(locked.is_ok());
    REQUIRE(members.locks.at(kKey) == "n0");
    return two_phase.run(*locked, std::move(spec));
  }
  Result<TwoPhase::Prepared> run() { return run(import_spec()); }
  StepRecord recorded() {
    auto r = keyed_record(kKey, members.records.at(kKey).value);
    REQUIRE(r.is_ok());
    return std::get<StepRecord>(r->value);
  }
};

using Log = std::vector<std::string>;

bool has(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

TEST_CASE("two phases: every node prepares, the record is written, every node commits", "[two_phase]") {
  Fixture f;
  auto done = f.run();
  REQUIRE(done.is_ok());
  CHECK(done->nodes == std::vector<int>{0, 1, 2});
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "commit n0", "commit n1", "commit n2"});
  const StepRecord r = f.recorded();
  CHECK(r.kind == "import");
  CHECK(r.tx == f.peers.last_tx);
  CHECK(r.coordinator == "n0");
  CHECK(f.members.locks.empty());  // freed with the lock object
  CHECK(f.two_phase.undecided() == 0);
  CHECK(f.two_phase.unaborted() == 0);
}

TEST_CASE("two phases: one node votes no, the change is aborted on every node", "[two_phase]") {
  Fixture f;
  f.peers.votes_no[1] = invalid("node n1: no room for j/1");
  auto spec = f.import_spec();
  spec.refused = "import of j/1 refused";
  auto done = f.run(std::move(spec));
  REQUIRE_FALSE(done.is_ok());
  CHECK(done.status().code() == Code::kInvalidArgument);
  CHECK(has(done.status(), "import of j/1 refused"));
  CHECK(has(done.status(), "no room for j/1"));
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "abort n0", "abort n1", "abort n2"});
  CHECK(f.peers.last_why.empty());  // a refusal may not hold when tried again (a fenced node)
  CHECK(f.members.decides == 0);
  CHECK(f.members.records.empty());
  CHECK(f.members.locks.empty());
}

TEST_CASE("two phases: a check across the replies fails, the change is aborted on every node", "[two_phase]") {
  Fixture f;
  f.peers.digests[2] = 9;
  auto spec = f.import_spec();
  spec.check = [](const std::vector<int>&, const std::vector<PrepareReply>& replies) {
    for (const auto& r : replies)
      if (r.ptc_digest != replies.front().ptc_digest) return invalid("ptc.json differs between the nodes");
    return Status::ok();
  };
  auto done = f.run(std::move(spec));
  REQUIRE_FALSE(done.is_ok());
  CHECK(has(done.status(), "ptc.json differs"));
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "abort n0", "abort n1", "abort n2"});
  // What every node prepared does not agree: trying again would not help, and the aborts say why.
  CHECK(f.peers.last_why == "ptc.json differs between the nodes");
  CHECK(f.members.decides == 0);
}

TEST_CASE("two phases: the decision is lost to another change, the change is aborted", "[two_phase]") {
  Fixture f;
  f.members.before_decide = [&] {
    StepRecord other = step_record("import", 1, {"n1"});
    other.tx = "othertx";
    other.coordinator = "n1";
    f.members.write(kKey, to_json(other));
  };
  auto done = f.run();
  REQUIRE_FALSE(done.is_ok());
  CHECK(done.status().code() == Code::kFailedPrecondition);
  CHECK(has(done.status(), "import of j/1 aborted on every node: " + kKey + " changed in etcd since it was prepared"));
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "abort n0", "abort n1", "abort n2"});
  CHECK(f.recorded().tx == "othertx");
  CHECK(f.members.locks.empty());
}

TEST_CASE("two phases: the lease ends between prepare and decide, the change is aborted", "[two_phase]") {
  Fixture f;
  f.members.before_decide = [&] { f.members.lease_lost = true; };
  auto done = f.run();
  REQUIRE_FALSE(done.is_ok());
  CHECK(has(done.status(), "or this node's lease ended"));
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "abort n0", "abort n1", "abort n2"});
  CHECK(f.members.records.empty());
  CHECK(f.members.locks.empty());
}

TEST_CASE("two phases: the coordinator holds a new lease at the decision, the change is aborted", "[two_phase]") {
  // Found by the chaos soak (seed 7, 10 minutes): the coordinator, stopped past its lease during
  // a progress, registered again under a new lease, and its decision (checked against the new
  // one) won, while the nodes had dropped their parts with the old lease: the CLI said the
  // progress succeeded and one node served the old position until it caught up.
  Fixture f;
  f.members.before_decide = [&] { f.members.current_lease = 8; };
  auto done = f.run();
  REQUIRE_FALSE(done.is_ok());
  CHECK(done.status().code() == Code::kFailedPrecondition);
  CHECK(has(done.status(), "or this node's lease ended"));
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "abort n0", "abort n1", "abort n2"});
  CHECK(f.members.records.empty());
  CHECK(f.members.locks.empty());
}

TEST_CASE("two phases: etcd applies the decision but its answer is lost; settled as committed", "[two_phase]") {
  Fixture f;
  f.members.apply_then_drop = true;
  auto done = f.run();
  REQUIRE_FALSE(done.is_ok());
  CHECK(done.status().code() == Code::kUnavailable);
  CHECK(has(done.status(), "import of j/1: etcd did not answer the commit; node n0 keeps " + kKey + " locked"));
  // Nothing is committed or aborted yet, and the key stays locked past the change's end.
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2"});
  CHECK(f.two_phase.undecided() == 1);
  CHECK(f.members.locks.at(kKey) == "n0");
  // While etcd is silent, settling does nothing.
  f.two_phase.settle();
  CHECK(f.two_phase.undecided() == 1);
  CHECK(f.peers.log.size() == 3);
  {
    f.members.etcd_down = false;
    // A new change of the key settles it first (etcd answers now, and its record shows the
    // change's transaction): committed, and the lock taken anew.
    auto again = f.two_phase.lock(kKey);
    REQUIRE(again.is_ok());
    CHECK(f.two_phase.undecided() == 0);
    CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "commit n0", "commit n1", "commit n2"});
    CHECK(again->record()->tx() == f.peers.last_tx);
  }
  CHECK(f.members.locks.empty());
}

TEST_CASE("two phases: etcd does not answer, then its record does not show the change; fenced and aborted",
          "[two_phase]") {
  Fixture f;
  f.members.before_decide = [&] { f.members.etcd_down = true; };
  auto done = f.run();
  REQUIRE_FALSE(done.is_ok());
  CHECK(f.two_phase.undecided() == 1);
  CHECK(f.members.locks.at(kKey) == "n0");
  // Another change of the key meanwhile is refused, naming the undecided one.
  {
    auto refused = f.two_phase.lock(kKey);
    REQUIRE_FALSE(refused.is_ok());
    CHECK(refused.status().code() == Code::kFailedPrecondition);
    CHECK(has(refused.status(), "is not settled yet"));
  }
  CHECK(f.members.locks.at(kKey) == "n0");
  f.members.etcd_down = false;
  CHECK(f.two_phase.settle() == 0);
  CHECK(f.two_phase.undecided() == 0);
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "abort n0", "abort n1", "abort n2"});
  // The record is written over so that the lost transaction can never apply.
  const StepRecord fence = f.recorded();
  CHECK(fence.removed);
  CHECK(fence.fenced == f.peers.last_tx);
  CHECK(f.members.locks.empty());
}

TEST_CASE("two phases: a fence etcd refuses leaves the change undecided until it succeeds", "[two_phase]") {
  Fixture f;
  f.members.before_decide = [&] { f.members.etcd_down = true; };
  REQUIRE_FALSE(f.run().is_ok());
  // etcd answers reads and locks again, but the decision is still unknown: a fence fails.
  f.members.etcd_down = false;
  f.members.lease_lost = true;  // decide (the fence) answers false: settled later
  auto refused = f.two_phase.lock(kKey);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == Code::kFailedPrecondition);
  CHECK(has(refused.status(),
            "import of j/1 (transaction " + f.peers.last_tx + ", coordinated by this node, n0) is not settled yet"));
  CHECK(f.members.locks.at(kKey) == "n0");
  f.members.lease_lost = false;
  f.two_phase.settle();
  CHECK(f.two_phase.undecided() == 0);
  CHECK(f.members.locks.empty());
}

TEST_CASE("two phases: a missed abort is sent again until the node answers", "[two_phase]") {
  Fixture f;
  f.peers.down = {2};
  auto done = f.run();
  REQUIRE_FALSE(done.is_ok());
  CHECK(done.status().code() == Code::kDeadlineExceeded);
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "abort n0", "abort n1", "missed abort n2"});
  CHECK(f.two_phase.unaborted() == 1);
  CHECK(f.two_phase.settle() == 1);  // still down
  CHECK(f.peers.log.back() == "missed abort n2");
  f.peers.down.clear();
  CHECK(f.two_phase.settle() == 0);
  CHECK(f.peers.log.back() == "abort n2");
  CHECK(f.two_phase.settle() == 0);  // nothing owed: nothing sent
  CHECK(f.peers.log.size() == 8);
}

TEST_CASE("two phases: a second change of a locked key is refused naming the holder", "[two_phase]") {
  Fixture f;
  f.members.locks[kKey] = "n1";
  auto refused = f.two_phase.lock(kKey);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == Code::kFailedPrecondition);
  CHECK(has(refused.status(), "being changed by node n1"));
  CHECK(f.peers.log.empty());
  CHECK(f.members.locks.at(kKey) == "n1");  // still the holder's
}

TEST_CASE("two phases: the lock of a key is held while the change runs, and refuses a record that does not decode",
          "[two_phase]") {
  Fixture f;
  {
    auto locked = f.two_phase.lock(kKey);
    REQUIRE(locked.is_ok());
    CHECK(locked->revision() == 0);
    CHECK_FALSE(locked->record().has_value());
    auto second = f.two_phase.lock(kKey);
    REQUIRE_FALSE(second.is_ok());
    CHECK(has(second.status(), "being changed by node n0"));
  }
  CHECK(f.members.locks.empty());
  f.members.write(kKey, json{{"tx", 5}});
  auto bad = f.two_phase.lock(kKey);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(has(bad.status(), kKey));
  CHECK(f.members.locks.empty());
}

TEST_CASE("two phases: kReachable leaves out a node that does not answer", "[two_phase]") {
  Fixture f;
  f.peers.down = {2};
  auto spec = f.import_spec();
  spec.quorum = ChangeSpec::Quorum::kReachable;
  auto done = f.run(std::move(spec));
  REQUIRE(done.is_ok());
  CHECK(done->nodes == std::vector<int>{0, 1});
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "commit n0", "commit n1"});
}

TEST_CASE("two phases: kReachable still aborts on a refusal, on the nodes that prepared", "[two_phase]") {
  Fixture f;
  f.peers.down = {2};
  f.peers.votes_no[1] = invalid("bad position");
  auto spec = f.import_spec();
  spec.quorum = ChangeSpec::Quorum::kReachable;
  auto done = f.run(std::move(spec));
  REQUIRE_FALSE(done.is_ok());
  CHECK(f.peers.log == Log{"prepare n0", "prepare n1", "prepare n2", "abort n0"});
}

TEST_CASE("two phases: a node that holds its part already is not asked, and commits with the others", "[two_phase]") {
  Fixture f;
  auto spec = f.import_spec();
  spec.held = {0};
  auto done = f.run(std::move(spec));
  REQUIRE(done.is_ok());
  CHECK(done->nodes == std::vector<int>{1, 2});
  CHECK(f.peers.log == Log{"prepare n1", "prepare n2", "commit n0", "commit n1", "commit n2"});
}

}  // namespace
}  // namespace ptcfs
