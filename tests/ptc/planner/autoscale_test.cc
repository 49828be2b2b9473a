#include "ptc/planner/autoscale.h"

#include <catch2/catch.hpp>

#include <string>

#include "model_fixtures.h"

using namespace ptcfs;
using namespace ptcfs::planner;

namespace {

const char* kA = R"({"job": {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 100, "2": 180, "4": 300}},
                     "daemon": "127.0.0.1:7070"})";
// b accepts global batches 4..16; per (gpus, batch) samples/s.
std::string b_entry(const std::string& layout = "") {
  return R"({"job": {"min_gpus": 1, "max_gpus": 4, "batch": {"min": 4, "max": 16},
             "throughput": {"1": {"4": 50}, "2": {"4": 90, "8": 110}, "4": {"8": 200, "16": 260}}},
             "daemon": "10.0.0.2:7070", "store_job": "b-store")" +
         (layout.empty() ? "" : ", \"layout\": " + layout) + "}";
}

QueueEntry entry(const std::string& text, const std::string& name) {
  auto e = parse_queue_entry(text, name, "queue/" + name);
  INFO((e.is_ok() ? "" : e.status().message()));
  REQUIRE(e.is_ok());
  return *e;
}

Decision running(const std::string& job, int gpus, int64_t batch, int tp, int pp, int dp) {
  return {job, false, gpus, batch, tp, pp, dp, 0};
}
Decision waiting(const std::string& job) { return {job, true, 0, 0, 0, 0, 0, 0}; }

std::vector<Decision> decide(const std::vector<QueueEntry>& q, int gpus) {
  auto d = decide_throughput(q, gpus);
  INFO((d.is_ok() ? "" : d.status().message()));
  REQUIRE(d.is_ok());
  return *d;
}

}  // namespace

TEST_CASE("queue entries are parsed and bad ones refused by member", "[autoscale]") {
  const QueueEntry a = entry(kA, "a");
  CHECK(a.spec.name == "a");
  CHECK(a.daemon == "127.0.0.1:7070");
  CHECK(a.store_job == "a");
  CHECK(a.tp == 1);
  CHECK(a.pp == 1);
  const QueueEntry b = entry(b_entry(R"({"tp": 2})"), "b");
  CHECK(b.store_job == "b-store");
  CHECK(b.tp == 2);
  CHECK(b.pp == 1);
  REQUIRE(b.spec.batch);
  CHECK(b.spec.batch->max == 16);

  auto refused = [](const std::string& text, const std::string& needle) {
    auto e = parse_queue_entry(text, "x", "queue/x");
    REQUIRE_FALSE(e.is_ok());
    CHECK(e.status().code() == Code::kInvalidArgument);
    CHECK_THAT(e.status().message(), Catch::StartsWith("queue/x") && Catch::Contains(needle));
  };
  refused(R"({"job": {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}}})", "'daemon'");
  refused(R"({"job": {"name": "y", "min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}}, "daemon": "h:1"})",
          "job.name must be the queue name 'x'");
  refused(R"({"job": {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}}, "daemon": "h:1", "gpus": 3})", "unknown");
  refused(R"({"job": {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}}, "daemon": "h:1",
              "layout": {"tp": 0}})",
          "layout.tp");
  // A product that overflowed an int divided by zero when the counts were filtered.
  refused(R"({"job": {"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}}, "daemon": "h:1",
              "layout": {"tp": 65536, "pp": 65536}})",
          "layout.tp x layout.pp (4294967296) is more than the job's max_gpus (2)");
  refused(R"({"job": {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 1}}, "daemon": "h:1",
              "layout": {"tp": 2, "pp": 4}})",
          "layout.tp x layout.pp (8) is more than the job's max_gpus (4)");
  refused(R"({"job": {"min_gpus": 3, "max_gpus": 2, "throughput": {"1": 1}}, "daemon": "h:1"})", "min_gpus");
  refused("[1]", "queue/x");
}

TEST_CASE("two jobs share the GPUs; when one finishes the other grows, batch included", "[autoscale]") {
  const std::vector<QueueEntry> both = {entry(kA, "a"), entry(b_entry(), "b")};
  // a2 + b2 at batch 8: 180 + 110 = 290, the best of every split of 4 GPUs.
  CHECK(decide(both, 4) == std::vector<Decision>{running("a", 2, 0, 1, 1, 2), running("b", 2, 8, 1, 1, 2)});
  // b alone: 4 GPUs at batch 16 (260 samples/s).
  CHECK(decide({both[1]}, 4) == std::vector<Decision>{running("b", 4, 16, 1, 1, 4)});
  // One GPU: a (first come) runs on it, b waits.
  CHECK(decide(both, 1) == std::vector<Decision>{running("a", 1, 0, 1, 1, 1), waiting("b")});
  CHECK(decide(both, 0) == std::vector<Decision>{waiting("a"), waiting("b")});
}

TEST_CASE("a layout keeps tp and pp: counts it does not divide are no options", "[autoscale]") {
  const std::vector<QueueEntry> q = {entry(kA, "a"), entry(b_entry(R"({"tp": 2})"), "b")};
  CHECK(decide(q, 4) == std::vector<Decision>{running("a", 2, 0, 1, 1, 2), running("b", 2, 8, 2, 1, 1)});
  CHECK(decide({q[1]}, 4) == std::vector<Decision>{running("b", 4, 16, 2, 1, 2)});
  // b's only count on 1 GPU is gone, so with 1 GPU b has no option and waits.
  CHECK(decide({q[1]}, 1) == std::vector<Decision>{waiting("b")});
  // A dp that does not divide the batch is no option: tp 1 and a batch of 6 on 4 GPUs.
  const QueueEntry c = entry(R"({"job": {"min_gpus": 1, "max_gpus": 4, "batch": [6],
                                  "throughput": {"2": {"6": 10}, "4": {"6": 30}}}, "daemon": "h:1"})",
                             "c");
  CHECK(decide({c}, 4) == std::vector<Decision>{running("c", 2, 6, 1, 1, 2)});
}

TEST_CASE("first come, first served: a job that cannot run holds back those after it", "[autoscale]") {
  const QueueEntry big =
      entry(R"({"job": {"min_gpus": 8, "max_gpus": 8, "throughput": {"8": 1000}}, "daemon": "h:1"})", "big");
  CHECK(decide({big, entry(kA, "a")}, 4) == std::vector<Decision>{waiting("big"), waiting("a")});
  CHECK(decide({entry(kA, "a"), big}, 4) == std::vector<Decision>{running("a", 4, 0, 1, 1, 4), waiting("big")});
  CHECK_FALSE(decide_throughput({big}, -1).is_ok());
}

TEST_CASE("a modelled job gets the planner's configuration without interleaving", "[autoscale]") {
  QueueEntry m;
  m.spec.name = "m";
  m.spec.min_gpus = 4;
  m.spec.max_gpus = 4;
  m.spec.model = ptcfs::planner::testing::small_model();
  m.daemon = "h:1";
  const auto d = decide({m}, 4);
  REQUIRE(d.size() == 1);
  CHECK_FALSE(d[0].queued);
  CHECK(d[0].gpus == 4);
  CHECK(d[0].tp * d[0].pp * d[0].dp == 4);
  CHECK(d[0].micro_batch >= 1);
  CHECK(d[0].global_batch == m.spec.model->global_batch);
  CHECK(autoscale_specs({m})[0].model->interleave == false);
  // A repartitioned step's stages split the layers evenly, whatever the job's MODEL.json says.
  m.spec.model->pipeline_split = PipelineSplit::kEmbeddingAndLoss;
  CHECK(autoscale_specs({m})[0].model->pipeline_split == PipelineSplit::kEven);
}

TEST_CASE("changes: new or different decisions, finished jobs; none a second time", "[autoscale]") {
  const std::vector<Decision> next = {running("a", 2, 0, 1, 1, 2), running("b", 2, 8, 1, 1, 2)};
  const Changes first = changes(next, {});
  CHECK(first.changed == next);
  CHECK(first.finished.empty());
  std::map<std::string, Decision> stored = {{"a", next[0]}, {"b", next[1]}};
  const Changes again = changes(next, stored);
  CHECK(again.changed.empty());
  CHECK(again.finished.empty());
  const std::vector<Decision> grown = {running("b", 4, 16, 1, 1, 4)};
  const Changes after = changes(grown, stored);
  CHECK(after.changed == grown);
  CHECK(after.finished == std::vector<std::string>{"a"});
  CHECK(after.shrinks == 0);
  // a waits, b shrinks, c is new, and d grows: the shrinks (a to 0 GPUs, b) come first.
  stored["c0"] = running("c0", 1, 0, 1, 1, 1);
  stored["d"] = running("d", 1, 0, 1, 1, 1);
  const std::vector<Decision> moved = {waiting("a"), running("d", 2, 0, 1, 1, 2), running("c", 1, 0, 1, 1, 1),
                                       running("b", 1, 4, 1, 1, 1), running("c0", 1, 0, 1, 1, 1)};
  const Changes order = changes(moved, stored);
  CHECK(order.changed == std::vector<Decision>{waiting("a"), running("b", 1, 4, 1, 1, 1), running("d", 2, 0, 1, 1, 2),
                                               running("c", 1, 0, 1, 1, 1)});
  CHECK(order.shrinks == 2);
  CHECK(order.finished.empty());
}

TEST_CASE("stored decisions round-trip; the latest step is by number", "[autoscale]") {
  const StoredDecision s{running("b", 4, 16, 2, 1, 2), "20", 7, "ctl-1"};
  CHECK(stored_decision_json(s) ==
        R"({"controller":"ctl-1","dp":2,"global_batch":16,"gpus":4,"job":"b","micro_batch":null,"pp":1,)"
        R"("queued":false,"seq":7,"step":"20","tp":2})");
  auto back = parse_stored_decision(stored_decision_json(s), "b", "decision/b");
  REQUIRE(back.is_ok());
  CHECK(back->decision == s.decision);
  CHECK(back->step == "20");
  CHECK(back->seq == 7);
  CHECK(back->controller == "ctl-1");
  auto w = parse_stored_decision(stored_decision_json({waiting("a"), "", 1, "c"}), "a", "decision/a");
  REQUIRE(w.is_ok());
  CHECK(w->decision == waiting("a"));
  CHECK(w->step.empty());
  CHECK_FALSE(parse_stored_decision(R"({"gpus": -1})", "a", "decision/a").is_ok());
}

TEST_CASE("a stored decision beyond any capacity, or not tp x pp x dp, is refused", "[autoscale]") {
  const auto text = [](const std::string& gpus, int tp, int pp, int dp, bool queued = false) {
    return R"({"controller":"c","dp":)" + std::to_string(dp) + R"(,"global_batch":null,"gpus":)" + gpus +
           R"(,"job":"a","micro_batch":null,"pp":)" + std::to_string(pp) + R"(,"queued":)" +
           (queued ? "true" : "false") + R"(,"seq":1,"step":"1","tp":)" + std::to_string(tp) + "}";
  };
  // 2^32 - 8 GPUs read as an int was -8: capacity grew by 8 for the jobs after it.
  CHECK(parse_stored_decision(text("4294967288", 1, 1, 8), "a", "decision/a").status().message() ==
        "decision/a: gpus: 4294967288 is outside [0, 1048576]");
  CHECK(parse_stored_decision(text("8", 1, 1, 4), "a", "decision/a").status().message() ==
        "decision/a: a running decision has gpus = tp x pp x dp, each at least 1 (gpus 8, tp 1, pp 1, dp 4)");
  CHECK(parse_stored_decision(text("0", 0, 0, 0), "a", "decision/a").status().message() ==
        "decision/a: a running decision has gpus = tp x pp x dp, each at least 1 (gpus 0, tp 0, pp 0, dp 0)");
  CHECK(parse_stored_decision(text("2", 1, 1, 2, true), "a", "decision/a").status().message() ==
        "decision/a: a queued decision holds no GPUs and no layout (gpus 2, tp 1, pp 1, dp 2)");
  CHECK(parse_stored_decision(text("8", 2, 2, 2), "a", "decision/a").is_ok());
}

TEST_CASE("a queue entry naming the store job of an earlier one is found", "[autoscale]") {
  std::vector<QueueEntry> q = {entry(kA, "a"), entry(kA, "b"), entry(kA, "c")};
  q[0].daemon = q[1].daemon = q[2].daemon = "h:1";
  q[1].store_job = "a";  // b's store job is a's
  q[2].store_job = "a";
  q[2].daemon = "h:2";  // another daemon's job of that name: another step
  const auto d = duplicate_store_jobs(q);
  REQUIRE(d.size() == 1);
  CHECK(d[0].first == 1);
  CHECK(d[0].second ==
        "it names store job 'a' at h:1, as the earlier queue entry of job 'a' does (one step cannot follow two jobs' "
        "decisions)");

  CHECK(latest_step({"9", "10", "2"}) == std::optional<std::string>("10"));
  CHECK(latest_step({"010", "9"}) == std::optional<std::string>("010"));
  CHECK(latest_step({"a", "b"}) == std::optional<std::string>("b"));
  CHECK(latest_step({}) == std::nullopt);
}

TEST_CASE("the makespan policy runs now the jobs its schedule starts at 0", "[autoscale]") {
  const std::vector<QueueEntry> q = {entry(kA, "a"), entry(b_entry(), "b")};
  Schedule s;
  JobOption a_opt{2, 180, std::nullopt, 0};
  JobOption b_opt{4, 260, std::nullopt, 16};
  s.jobs = {{"a", {a_opt, 10}, 0, 10, {0, 1}}, {"b", {b_opt, 5}, 10, 15, {0, 1, 2, 3}}};
  s.makespan_s = 15;
  const auto now = starting_now(s);
  REQUIRE(now.size() == 2);
  CHECK_FALSE(now[0].queued);
  CHECK(now[1].queued);
  CHECK(decisions_from(q, now) == std::vector<Decision>{running("a", 2, 0, 1, 1, 2), waiting("b")});
  // fitting_options: the first job with no option on the capacity ends the prefix.
  const auto specs = autoscale_specs({entry(kA, "a"), entry(b_entry(R"({"tp": 2})"), "b"), entry(kA, "c")});
  CHECK(fitting_options(specs, 4).size() == 3);
  CHECK(fitting_options(specs, 1).size() == 1);  // b has no option on 1 GPU at tp 2: b and c wait
  CHECK(fitting_options(specs, 0).size() == 0);
}

TEST_CASE("the makespan policy plans a running job on the samples it has left", "[autoscale]") {
  const std::string job = R"({"min_gpus": 1, "max_gpus": 4, "samples": 36000, "throughput": {"1": 100, "2": 180}})";
  const QueueEntry fresh = entry(R"({"job": )" + job + R"(, "daemon": "h:1"})", "fresh");
  const QueueEntry half = entry(R"({"job": )" + job + R"(, "daemon": "h:1", "samples_done": 18000})", "half");
  CHECK(fresh.samples_done == 0);
  CHECK(half.samples_done == 18000);
  CHECK(fresh.samples_done_step == std::nullopt);
  CHECK(half.samples_done_step == std::nullopt);
  // The step the count reaches (the launcher's, for an idempotent write): parsed, not planned on.
  const QueueEntry stepped =
      entry(R"({"job": )" + job + R"(, "daemon": "h:1", "samples_done": 18000, "samples_done_step": 450})", "stepped");
  CHECK(stepped.samples_done_step == 450);
  CHECK(entry(R"({"job": )" + job + R"(, "daemon": "h:1", "samples_done": 0, "samples_done_step": 0})", "zero")
            .samples_done_step == 0);
  CHECK(autoscale_specs({stepped})[0].samples == 18000.0);
  CHECK(half.spec.samples == 36000.0);  // the entry keeps the total
  const auto specs = autoscale_specs({fresh, half});
  CHECK(specs[0].samples == 36000.0);
  CHECK(specs[1].samples == 18000.0);
  // The program's input: run times from what remains, 36000 / 100 and / 180 against half of each.
  const auto timed = timed_options(specs, fitting_options(specs, 2));
  REQUIRE(timed.is_ok());
  REQUIRE(timed->size() == 2);
  REQUIRE((*timed)[0].size() == 2);
  REQUIRE((*timed)[1].size() == 2);
  CHECK((*timed)[0][0].seconds == 360.0);
  CHECK((*timed)[0][1].seconds == 200.0);
  CHECK((*timed)[1][0].seconds == 180.0);
  CHECK((*timed)[1][1].seconds == 100.0);

  auto refused = [&](const std::string& text, const std::string& needle) {
    auto e = parse_queue_entry(text, "x", "queue/x");
    REQUIRE_FALSE(e.is_ok());
    CHECK_THAT(e.status().message(), Catch::StartsWith("queue/x") && Catch::Contains(needle));
  };
  refused(R"({"job": )" + job + R"(, "daemon": "h:1", "samples_done": 36000})",
          "samples_done must be a number of samples >= 0 and below the job's samples (36000.0");
  refused(R"({"job": )" + job + R"(, "daemon": "h:1", "samples_done": -1})", "samples_done must be");
  refused(R"({"job": )" + job + R"(, "daemon": "h:1", "samples_done": "1"})", "samples_done must be");
  refused(R"({"job": {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 100}}, "daemon": "h:1", "samples_done": 1})",
          "'samples_done' goes with the job's 'samples'");
  auto refused_exactly = [&](const std::string& members, const std::string& message) {
    auto e = parse_queue_entry(R"({"job": )" + job + R"(, "daemon": "h:1", )" + members + "}", "x", "queue/x");
    REQUIRE_FALSE(e.is_ok());
    CHECK(e.status().message() == message);
  };
  refused_exactly(R"("samples_done_step": 4)", "queue/x: 'samples_done_step' goes with 'samples_done'");
  refused_exactly(R"("samples_done": 8, "samples_done_step": -1)",
                  "queue/x: samples_done_step: -1 is outside [0, 9223372036854775807]");
  refused_exactly(R"("samples_done": 8, "samples_done_step": 4.5)",
                  "queue/x: samples_done_step: expected an integer, got 4.5");
  refused_exactly(R"("samples_done": 8, "samples_done_step": "4")",
                  "queue/x: samples_done_step: expected an integer, got \"4\"");
  refused_exactly(R"("samples_done": 8, "samples_dones_step": 4)",
                  "queue/x: unknown key 'samples_dones_step' (allowed: job, daemon, store_job, layout, samples_done, "
                  "samples_done_step)");
}

TEST_CASE("with a horizon, a running job's moves are weighed against its stored decision", "[autoscale]") {
  // a ran alone on 4 GPUs; b arrives and the capacity is 5. Unweighed: a1 + b4 at 16 (100 + 260)
  // beats a4 + b1 (300 + 50). a's change costs 300 s: over 600 s its other options count half
  // (a1 50 + b4 260 = 310), so a stays on 4 and b gets 1 at batch 4.
  const std::string a_text = R"({"job": {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 100, "2": 180, "4": 300},
                                          "move_seconds": 300}, "daemon": "127.0.0.1:7070"})";
  const std::vector<QueueEntry> q = {entry(a_text, "a"), entry(b_entry(), "b")};
  const std::map<std::string, Decision> stored = {{"a", running("a", 4, 0, 1, 1, 4)}};
  auto weighed = decide_throughput(q, 5, stored, 600);
  REQUIRE(weighed.is_ok());
  CHECK(*weighed == std::vector<Decision>{running("a", 4, 0, 1, 1, 4), running("b", 1, 4, 1, 1, 1)});
  CHECK(decide(q, 5) == std::vector<Decision>{running("a", 1, 0, 1, 1, 1), running("b", 4, 16, 1, 1, 4)});
  // A stored decision that waits is no run to keep.
  auto queued = decide_throughput(q, 5, {{"a", waiting("a")}}, 600);
  REQUIRE(queued.is_ok());
  CHECK((*queued)[0] == running("a", 1, 0, 1, 1, 1));
  // The controller's to know: an entry may not say what its job runs on.
  auto e = parse_queue_entry(R"({"job": {"min_gpus": 1, "max_gpus": 4, "throughput": {"1": 1},
                                         "current": {"gpus": 1}}, "daemon": "h:1"})",
                             "x", "queue/x");
  REQUIRE_FALSE(e.is_ok());
  CHECK(e.status().message() == "queue/x: job.current is the controller's: a job runs on its stored decision");
}
