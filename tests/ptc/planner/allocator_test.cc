#include "ptc/planner/allocator.h"

#include <catch2/catch.hpp>

#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <tuple>

#include "model_fixtures.h"
#include "ptc/planner/planner.h"

using namespace ptcfs;
using namespace ptcfs::planner;
using ptcfs::planner::testing::small_model;

namespace {

const std::string kFile = "JOBS.json";

JobSpec measured(const std::string& name, int lo, int hi, std::vector<std::pair<int, double>> points) {
  JobSpec j;
  j.name = name;
  j.min_gpus = lo;
  j.max_gpus = hi;
  for (const auto& [g, rate] : points) j.points.push_back({g, rate, 0});
  return j;
}

void expect_invalid(const std::string& text, std::initializer_list<std::string> needles) {
  INFO("document: " << text);
  auto r = parse_jobs_json(text, kFile);
  REQUIRE_FALSE(r.is_ok());
  INFO("message: " << r.status().message());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::StartsWith(kFile));
  for (const auto& n : needles) CHECK_THAT(r.status().message(), Catch::Contains(n));
}

std::string job(const std::string& body) { return R"({"jobs": [)" + body + "]}"; }

// Every choice of one option per job, the largest total (summed in job order, as the
// dynamic program sums), or -1 when none fits.
double brute_force(const std::vector<std::vector<JobOption>>& options, int gpus) {
  double best = -1;
  std::function<void(size_t, int, double)> go = [&](size_t j, int used, double total) {
    if (j == options.size()) {
      best = std::max(best, total);
      return;
    }
    for (const auto& o : options[j])
      if (used + o.gpus <= gpus) go(j + 1, used + o.gpus, total + o.samples_per_s);
  };
  go(0, 0, 0.0);
  return best;
}

// The dynamic program's allocation of `gpus` against brute force: the same total (exactly), on at
// most `gpus`, one valid option per job; or both find none. Whether there was one.
bool agrees_with_brute_force(const std::vector<std::vector<JobOption>>& options, int gpus) {
  const double want = brute_force(options, gpus);
  const auto got = max_total_throughput(options, gpus);
  if (want < 0) {
    CHECK_FALSE(got);
    return false;
  }
  REQUIRE(got);
  REQUIRE(got->size() == options.size());
  double total = 0;
  int used = 0;
  for (size_t j = 0; j < options.size(); ++j) {
    REQUIRE((*got)[j] < options[j].size());
    total += options[j][(*got)[j]].samples_per_s;
    used += options[j][(*got)[j]].gpus;
  }
  CHECK(total == want);
  CHECK(used <= gpus);
  return true;
}

}  // namespace

TEST_CASE("JOBS.json: measured points and models are read, points sorted by GPU count", "[allocator]") {
  const std::string text = R"({"jobs": [
    {"name": "bert", "min_gpus": 1, "max_gpus": 8, "throughput": {"8": 1300, "1": 210.5, "4": 760, "2": 400}},
    {"name": "gpt", "min_gpus": 4, "max_gpus": 64, "model": {"layers": 4, "hidden": 64, "heads": 4, "ffn": 256,
      "vocab": 256, "seq": 32, "global_batch": 8,
      "gpu": {"memory_gb": 16, "tflops": 100, "per_node": 4, "intra_node_gbps": 800, "inter_node_gbps": 100}}}]})";
  auto r = parse_jobs_json(text, kFile);
  REQUIRE(r.is_ok());
  REQUIRE(r->size() == 2);
  const JobSpec& bert = (*r)[0];
  CHECK(bert.name == "bert");
  CHECK(bert.min_gpus == 1);
  CHECK(bert.max_gpus == 8);
  CHECK(bert.points == std::vector<ThroughputPoint>{{1, 210.5, 0}, {2, 400, 0}, {4, 760, 0}, {8, 1300, 0}});
  CHECK_FALSE(bert.batch);
  CHECK_FALSE(bert.model);
  const JobSpec& gpt = (*r)[1];
  REQUIRE(gpt.model);
  CHECK(gpt.model->layers == 4);
  CHECK(gpt.points.empty());
}

TEST_CASE("JOBS.json: bad documents are refused, naming the job and member", "[allocator]") {
  expect_invalid(R"({"job": []})", {"unknown key 'job'"});
  expect_invalid(R"({"jobs": []})", {"'jobs' must be a non-empty list"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}, "prio": 3})"),
                 {"jobs[0]: unknown key 'prio'"});
  expect_invalid(job(R"({"min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}})"), {"jobs[0] lacks 'name'"});
  expect_invalid(job(R"({"name": "a", "max_gpus": 2, "throughput": {"1": 1}})"), {"jobs[0] ('a') lacks 'min_gpus'"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 3, "max_gpus": 2, "throughput": {"1": 1}})"),
                 {"jobs[0] ('a'): min_gpus (3) is more than max_gpus (2)"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 0, "max_gpus": 2, "throughput": {"1": 1}})"),
                 {"jobs[0] ('a'): min_gpus: 0 is outside [1, 65536]"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2})"),
                 {"jobs[0] ('a'): give exactly one of 'throughput' (measured points) and 'model' (MODEL.json)"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}, "model": {}})"),
                 {"give exactly one of"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"two": 1}})"),
                 {"jobs[0] ('a'): throughput: 'two' is not a GPU count"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"01": 1}})"),
                 {"'01' is not a GPU count"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"0": 1}})"),
                 {"'0' is not a GPU count"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"1": -3}})"),
                 {"throughput[\"1\"] must be a number of samples/s from 0 to 1e15, got -3"});
  // Rates near the largest double made the totals infinite (printed as null).
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1.7e308}})"),
                 {"throughput[\"1\"] must be a number of samples/s from 0 to 1e15, got 1.7e+308"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {}})"),
                 {"throughput must be a non-empty object"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "model": {"layers": 4}})"),
                 {"jobs[0] ('a'): model lacks 'hidden'"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}},
                        {"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"1": 1}})"),
                 {"job name 'a' appears twice"});
}

TEST_CASE("a job's options: its measured points within its range and the cluster, or the planner's best per count",
          "[allocator]") {
  const JobSpec a = measured("a", 2, 8, {{1, 5}, {2, 9}, {4, 17}, {8, 30}, {16, 50}});
  auto o = job_options(a, 6);
  REQUIRE(o.is_ok());
  REQUIRE(o->size() == 2);
  CHECK(((*o)[0].gpus == 2 && (*o)[0].samples_per_s == 9));
  CHECK(((*o)[1].gpus == 4 && (*o)[1].samples_per_s == 17));
  auto none = job_options(measured("b", 3, 3, {{2, 1}, {4, 2}}), 8);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().message() == "job 'b' has no throughput point between min_gpus 3 and max_gpus 3");

  // small_model on 1..8 GPUs: every count with a valid configuration that fits (not 5 or 7:
  // no tp, pp, dp of them divides 4 heads, 4 layers and a batch of 8), at
  // global_batch / the best step time.
  JobSpec g;
  g.name = "g";
  g.min_gpus = 1;
  g.max_gpus = 8;
  g.model = small_model();
  auto mo = job_options(g, 64);
  REQUIRE(mo.is_ok());
  std::vector<int> counts;
  for (const auto& x : *mo) {
    counts.push_back(x.gpus);
    const auto plan = plan_parallelism(small_model(), x.gpus);
    REQUIRE(plan.is_ok());
    CHECK(x.samples_per_s == 8 / plan->front().step_seconds());
    CHECK(x.config == plan->front().config);
  }
  CHECK(counts == std::vector<int>{1, 2, 3, 4, 6, 8});
}

TEST_CASE("the allocation of 8 GPUs between two measured jobs, by hand", "[allocator]") {
  // a: 1 -> 10, 2 -> 19, 4 -> 30, 8 -> 40; b: 2 -> 25, 4 -> 45, 6 -> 50 samples/s.
  // Totals on at most 8 GPUs: a1+b2 35, a1+b4 55, a1+b6 60, a2+b2 44, a2+b4 64, a2+b6 69,
  // a4+b2 55, a4+b4 75: the best.
  const std::vector<JobSpec> jobs = {measured("a", 1, 8, {{1, 10}, {2, 19}, {4, 30}, {8, 40}}),
                                     measured("b", 2, 6, {{2, 25}, {4, 45}, {6, 50}})};
  auto r = allocate_throughput(jobs, 8);
  REQUIRE(r.is_ok());
  REQUIRE(r->jobs.size() == 2);
  CHECK((r->jobs[0].name == "a" && r->jobs[0].option.gpus == 4 && !r->jobs[0].queued));
  CHECK((r->jobs[1].name == "b" && r->jobs[1].option.gpus == 4));
  CHECK(r->samples_per_s == 75);
  CHECK(r->gpus_used == 8);
  // On 7 GPUs: a1+b6 60, a2+b4 64, a1+b4 55, a4+b2 55: a2+b4.
  auto seven = allocate_throughput(jobs, 7);
  REQUIRE(seven.is_ok());
  CHECK(seven->jobs[0].option.gpus == 2);
  CHECK(seven->jobs[1].option.gpus == 4);
  CHECK(seven->samples_per_s == 64);
  CHECK(seven->gpus_used == 6);
}

TEST_CASE("moves weighed: a running job's other options count at 1 - move_seconds / horizon", "[allocator]") {
  // a ran alone on 8 GPUs; b arrives. Unweighed, a4 + b4 (75) is the best of 8 GPUs (above).
  std::vector<JobSpec> jobs = {measured("a", 1, 8, {{1, 10}, {2, 19}, {4, 30}, {8, 40}}),
                               measured("b", 2, 6, {{2, 25}, {4, 45}, {6, 50}})};
  jobs[0].current = Running{8, 0};
  jobs[0].move_seconds = 480;
  // Over 600 s a pays 480 for any change: its options count at 0.2 (a1 2, a2 3.8, a4 6); a8
  // leaves b no room. a2 + b6 = 53.8 beats a4 + b4 = 51 and a1 + b6 = 52.
  auto r = allocate_throughput(jobs, 8, 600);
  REQUIRE(r.is_ok());
  CHECK(r->jobs[0].option.gpus == 2);
  CHECK(r->jobs[1].option.gpus == 6);
  CHECK(r->samples_per_s == 69);  // the options' own rates: 19 + 50
  // Without a horizon, or without the move's cost, nothing is weighed.
  CHECK(allocate_throughput(jobs, 8)->jobs[0].option.gpus == 4);
  jobs[0].move_seconds = 0;
  CHECK(allocate_throughput(jobs, 8, 600)->jobs[0].option.gpus == 4);
  // a on 4 of 7 GPUs now, a change costing 360 of 600 s (0.4): staying (a4 30 + b2 25 = 55) beats
  // the unweighed best a2 + b4 (7.6 + 45 = 52.6) and a1 + b6 (4 + 50 = 54).
  jobs[0].current = Running{4, 0};
  jobs[0].move_seconds = 360;
  auto seven = allocate_throughput(jobs, 7, 600);
  REQUIRE(seven.is_ok());
  CHECK(seven->jobs[0].option.gpus == 4);
  CHECK(seven->jobs[1].option.gpus == 2);
  CHECK(seven->samples_per_s == 55);
  CHECK(allocate_throughput(jobs, 7)->jobs[0].option.gpus == 2);
  // A move longer than the horizon, when the current option is gone (a ran on 8; 6 are left): the
  // moves still rank by rate, so a takes the 6, not its smallest count.
  std::vector<JobSpec> shrunk = {measured("a", 1, 8, {{1, 10}, {2, 19}, {4, 30}, {6, 35}, {8, 40}})};
  shrunk[0].current = Running{8, 0};
  shrunk[0].move_seconds = 900;
  CHECK(allocate_throughput(shrunk, 6, 600)->jobs[0].option.gpus == 6);
}

TEST_CASE("weigh_moves: the current option, by count and batch, keeps weight 1", "[allocator][batch]") {
  JobSpec j;
  j.name = "a";
  j.move_seconds = 60;
  const std::vector<JobOption> base = {
      {2, 100, std::nullopt, 8}, {2, 110, std::nullopt, 16}, {4, 200, std::nullopt, 16}};
  const auto weights = [&](std::optional<Running> current, double horizon) {
    j.current = current;
    std::vector<JobOption> o = base;
    weigh_moves(j, horizon, o);
    return std::vector<double>{o[0].weight, o[1].weight, o[2].weight};
  };
  CHECK(weights(Running{2, 8}, 120) == std::vector<double>{1, 0.5, 0.5});
  CHECK(weights(Running{2, 0}, 120) == std::vector<double>{1, 1, 0.5});      // no batch given: any at 2 GPUs
  CHECK(weights(Running{4, 16}, 40) == std::vector<double>{1e-9, 1e-9, 1});  // a move longer than the horizon
  CHECK(weights(Running{2, 8}, 0) == std::vector<double>{1, 1, 1});          // no horizon
  CHECK(weights(std::nullopt, 120) == std::vector<double>{1, 1, 1});         // not running: starts anyway
  j.current = Running{2, 8};  // a measured option without a batch matches any
  std::vector<JobOption> plain = {{2, 100, std::nullopt, 0}, {4, 200, std::nullopt, 0}};
  weigh_moves(j, 120, plain);
  CHECK((plain[0].weight == 1 && plain[1].weight == 0.5));
}

TEST_CASE("JOBS.json: current and move_seconds", "[allocator]") {
  auto r = parse_jobs_json(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 4, "throughput": {"1": 1},
                                    "current": {"gpus": 2, "global_batch": 64}, "move_seconds": 90.5})"),
                           kFile);
  REQUIRE(r.is_ok());
  CHECK(r->front().current == Running{2, 64});
  CHECK(r->front().move_seconds == 90.5);
  const std::string head = R"({"name": "a", "min_gpus": 1, "max_gpus": 4, "throughput": {"1": 1}, )";
  expect_invalid(job(head + R"("current": 2})"), {"('a')", "current must be {\"gpus\": G"});
  expect_invalid(job(head + R"("current": {"global_batch": 8}})"), {"('a')", "current lacks 'gpus'"});
  expect_invalid(job(head + R"("current": {"gpus": 0}})"), {"('a')", "current.gpus"});
  expect_invalid(job(head + R"("current": {"gpus": 2, "batch": 8}})"), {"('a')", "unknown key 'batch'"});
  expect_invalid(job(head + R"("move_seconds": -1})"), {"('a')", "move_seconds must be a number of seconds >= 0"});
  expect_invalid(job(head + R"("move_seconds": "60"})"), {"('a')", "move_seconds"});
}

TEST_CASE("jobs are admitted first come, first served; the rest wait with no GPUs", "[allocator]") {
  const std::vector<JobSpec> jobs = {measured("a", 6, 8, {{6, 60}, {8, 70}}), measured("b", 4, 4, {{4, 100}}),
                                     measured("c", 1, 1, {{1, 5}})};
  auto r = allocate_throughput(jobs, 8);
  REQUIRE(r.is_ok());
  CHECK((!r->jobs[0].queued && r->jobs[0].option.gpus == 8));
  CHECK((r->jobs[1].queued && r->jobs[1].option.gpus == 0));
  CHECK((r->jobs[2].queued && r->jobs[2].option.gpus == 0));  // no overtaking b
  CHECK(r->samples_per_s == 70);
}

TEST_CASE("allocate refuses 0 GPUs, a job asking for more than there are, and a job with no options", "[allocator]") {
  const std::vector<JobSpec> ok = {measured("a", 1, 2, {{1, 1}})};
  CHECK(allocate_throughput(ok, 0).status().message() == "gpus must be at least 1, got 0");
  const std::vector<JobSpec> big = {measured("a", 1, 2, {{1, 1}}), measured("huge", 16, 32, {{16, 1}})};
  CHECK(allocate_throughput(big, 8).status().message() ==
        "job 'huge' asks for at least 16 GPUs, more than the 8 there are");
  const std::vector<JobSpec> gap = {measured("gap", 1, 16, {{16, 1}})};
  CHECK(allocate_throughput(gap, 8).status().message() ==
        "job 'gap' has no throughput point between min_gpus 1 and max_gpus 16 (at most 8 GPUs exist)");
  const std::vector<JobSpec> hole = {measured("hole", 2, 3, {{1, 1}, {4, 1}})};
  CHECK(allocate_throughput(hole, 8).status().message() ==
        "job 'hole' has no throughput point between min_gpus 2 and max_gpus 3");
}

TEST_CASE("the dynamic program equals brute force on random instances up to 5 jobs and 16 GPUs", "[allocator]") {
  std::mt19937 rng(14);
  int feasible = 0;
  for (int round = 0; round < 2000; ++round) {
    const int gpus = std::uniform_int_distribution<int>(1, 16)(rng);
    const int jobs = std::uniform_int_distribution<int>(1, 5)(rng);
    std::vector<std::vector<JobOption>> options(static_cast<size_t>(jobs));
    for (auto& o : options) {
      // Each job: a random non-empty subset of 1..16 GPUs with random rates.
      for (int g = 1; g <= 16; ++g)
        if (std::uniform_int_distribution<int>(0, 3)(rng) == 0)
          o.push_back({g, std::uniform_real_distribution<double>(0, 100)(rng), std::nullopt, 0});
      if (o.empty()) o.push_back({std::uniform_int_distribution<int>(1, 16)(rng), 1.5, std::nullopt, 0});
    }
    INFO("round " << round << ": " << jobs << " jobs on " << gpus << " GPUs");
    feasible += agrees_with_brute_force(options, gpus);
  }
  CHECK(feasible > 500);
}

TEST_CASE("the dynamic program equals brute force with several batches per GPU count", "[allocator][batch]") {
  // As job_options gives them: by (GPU count, batch) ascending, 1-3 batches on a count, rates
  // in whole numbers 0..12 so that equal rates (on one count and across counts) are common and
  // the pruning of dominated options (on more GPUs, no faster) is exercised with its ties.
  std::mt19937 rng(33);
  int feasible = 0, several = 0;
  for (int round = 0; round < 3000; ++round) {
    const int gpus = std::uniform_int_distribution<int>(1, 12)(rng);
    const int jobs = std::uniform_int_distribution<int>(1, 4)(rng);
    std::vector<std::vector<JobOption>> options(static_cast<size_t>(jobs));
    for (auto& o : options) {
      for (int g = 1; g <= 12; ++g) {
        if (std::uniform_int_distribution<int>(0, 2)(rng) != 0) continue;
        const int batches = std::uniform_int_distribution<int>(1, 3)(rng);
        for (int b = 0; b < batches; ++b)
          o.push_back({g, double(std::uniform_int_distribution<int>(0, 12)(rng)), std::nullopt, int64_t{8} << b});
        several += batches > 1;
      }
      if (o.empty()) o.push_back({std::uniform_int_distribution<int>(1, 12)(rng), 1, std::nullopt, 8});
    }
    INFO("round " << round << ": " << jobs << " jobs on " << gpus << " GPUs");
    feasible += agrees_with_brute_force(options, gpus);
  }
  CHECK(feasible > 1000);
  CHECK(several > 1000);
}

TEST_CASE("JOBS.json: a batch range or list, with throughput per GPU count and global batch", "[allocator][batch]") {
  auto r = parse_jobs_json(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 4, "batch": {"min": 128, "max": 512},
                                   "throughput": {"2": {"256": 22, "128": 18}, "1": {"128": 10}}},
                                  {"name": "b", "min_gpus": 2, "max_gpus": 4, "batch": [256, 64],
                                   "throughput": {"2": {"64": 25}}})"),
                           kFile);
  REQUIRE(r.is_ok());
  const JobSpec& a = (*r)[0];
  REQUIRE(a.batch);
  CHECK((a.batch->min == 128 && a.batch->max == 512 && a.batch->listed.empty()));
  CHECK(a.points == std::vector<ThroughputPoint>{{1, 10, 128}, {2, 18, 128}, {2, 22, 256}});
  const JobSpec& b = (*r)[1];
  REQUIRE(b.batch);
  CHECK((b.batch->min == 64 && b.batch->max == 256 && b.batch->listed == std::vector<int64_t>{64, 256}));
  CHECK(b.batch->accepts(64));
  CHECK_FALSE(b.batch->accepts(128));
  CHECK(a.batch->accepts(128));
  CHECK(a.batch->accepts(300));
  CHECK_FALSE(a.batch->accepts(513));
}

TEST_CASE("JOBS.json: malformed batch members are refused naming the job and member", "[allocator][batch]") {
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": {"min": 512, "max": 256},
                         "throughput": {"1": {"256": 1}}})"),
                 {"jobs[0] ('a'): batch.min (512) is more than batch.max (256)"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": {"min": 256},
                         "throughput": {"1": {"256": 1}}})"),
                 {"jobs[0] ('a'): batch lacks 'max'"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": {"min": 1, "max": 2, "step": 1},
                         "throughput": {"1": {"2": 1}}})"),
                 {"jobs[0] ('a'): batch: unknown key 'step'"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": {"min": 0, "max": 2},
                         "throughput": {"1": {"2": 1}}})"),
                 {"jobs[0] ('a'): batch.min"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": [],
                         "throughput": {"1": {"2": 1}}})"),
                 {"jobs[0] ('a'): batch must be a non-empty list of global batches"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": [64, 32, 64],
                         "throughput": {"1": {"64": 1}}})"),
                 {"jobs[0] ('a'): batch lists 64 twice"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": [64, "x"],
                         "throughput": {"1": {"64": 1}}})"),
                 {"jobs[0] ('a'): batch[1]"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": 64, "throughput": {"1": {"64": 1}}})"),
                 {"jobs[0] ('a'): batch must be a non-empty list of global batches or {\"min\", \"max\"}, got 64"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": [64], "throughput": {"1": 5}})"),
                 {"jobs[0] ('a'): throughput[\"1\"] must be a non-empty object of global batch -> samples/s"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "throughput": {"1": {"64": 5}}})"),
                 {"jobs[0] ('a'): throughput[\"1\"] gives samples/s per global batch, but the job gives no 'batch'"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": [64], "throughput": {"1": {"06": 5}}})"),
                 {"jobs[0] ('a'): throughput[\"1\"]: '06' is not a global batch"});
  expect_invalid(job(R"({"name": "a", "min_gpus": 1, "max_gpus": 2, "batch": [64], "throughput": {"1": {"64": -1}}})"),
                 {"jobs[0] ('a'): throughput[\"1\"][\"64\"] must be a number of samples/s from 0 to 1e15, got -1"});
}

namespace {

JobSpec batched(const std::string& name, int lo, int hi, BatchChoice batch, std::vector<ThroughputPoint> points) {
  JobSpec j;
  j.name = name;
  j.min_gpus = lo;
  j.max_gpus = hi;
  j.batch = std::move(batch);
  j.points = std::move(points);
  return j;
}

}  // namespace

TEST_CASE("the allocation of GPUs and global batches between two measured jobs, by hand", "[allocator][batch]") {
  // a: batches 128..512; b: batches 64 and 256 only. Points outside a job's batches are not options.
  const std::vector<JobSpec> jobs = {
      batched("a", 1, 4, {128, 512, {}},
              {{1, 10, 128}, {2, 18, 128}, {2, 22, 256}, {4, 40, 256}, {4, 46, 512}, {4, 60, 1024}}),
      batched("b", 2, 4, {64, 256, {64, 256}}, {{2, 25, 64}, {2, 99, 128}, {2, 30, 256}, {4, 42, 64}, {4, 52, 256}})};
  auto oa = job_options(jobs[0], 8);
  REQUIRE(oa.is_ok());
  std::vector<std::tuple<int, int64_t, double>> got;
  for (const auto& o : *oa) got.emplace_back(o.gpus, o.global_batch, o.samples_per_s);
  CHECK(got == std::vector<std::tuple<int, int64_t, double>>{
                   {1, 128, 10}, {2, 128, 18}, {2, 256, 22}, {4, 256, 40}, {4, 512, 46}});
  const auto pick = [&](int gpus) {
    auto r = allocate_throughput(jobs, gpus);
    REQUIRE(r.is_ok());
    return *r;
  };
  // 6 GPUs: a1/128+b2/256 40, a1/128+b4/256 62, a2/256+b2/256 52, a2/256+b4/256 74, a4/512+b2/256 76.
  Allocation six = pick(6);
  CHECK((six.jobs[0].option.gpus == 4 && six.jobs[0].option.global_batch == 512));
  CHECK((six.jobs[1].option.gpus == 2 && six.jobs[1].option.global_batch == 256));
  CHECK(six.samples_per_s == 76);
  CHECK(six.gpus_used == 6);
  // 5 GPUs: a1/128+b4/256 62 beats a2/256+b2/256 52.
  Allocation five = pick(5);
  CHECK((five.jobs[0].option.gpus == 1 && five.jobs[0].option.global_batch == 128));
  CHECK((five.jobs[1].option.gpus == 4 && five.jobs[1].option.global_batch == 256));
  CHECK(five.samples_per_s == 62);
  // 4 GPUs: a2/256+b2/256 52.
  Allocation four = pick(4);
  CHECK((four.jobs[0].option.gpus == 2 && four.jobs[0].option.global_batch == 256));
  CHECK((four.jobs[1].option.gpus == 2 && four.jobs[1].option.global_batch == 256));
  CHECK(four.samples_per_s == 52);
  // 8 GPUs: a4/512+b4/256 98.
  Allocation eight = pick(8);
  CHECK((eight.jobs[0].option.global_batch == 512 && eight.jobs[1].option.global_batch == 256));
  CHECK(eight.samples_per_s == 98);
  // A range that no point falls in.
  auto none = job_options(batched("c", 1, 4, {2048, 4096, {}}, {{1, 1, 128}}), 8);
  CHECK(none.status().message() ==
        "job 'c' has no throughput point between min_gpus 1 and max_gpus 4 at global batches 2048..4096");
}

TEST_CASE("the batches planned for a modelled job: the list, or doubling from min, and max", "[allocator][batch]") {
  CHECK(batches_to_plan({256, 2048, {}}) == std::vector<int64_t>{256, 512, 1024, 2048});
  CHECK(batches_to_plan({100, 300, {}}) == std::vector<int64_t>{100, 200, 300});
  CHECK(batches_to_plan({5, 5, {}}) == std::vector<int64_t>{5});
  CHECK(batches_to_plan({8, 24, {8, 12, 24}}) == std::vector<int64_t>{8, 12, 24});
}

TEST_CASE("a modelled job with a batch list: the planner's best per GPU count and batch", "[allocator][batch]") {
  JobSpec g;
  g.name = "g";
  g.min_gpus = 1;
  g.max_gpus = 4;
  g.model = small_model();
  g.batch = BatchChoice{8, 16, {8, 16}};
  auto mo = job_options(g, 64);
  REQUIRE(mo.is_ok());
  std::vector<std::pair<int, int64_t>> got, want;
  for (const auto& x : *mo) {
    got.emplace_back(x.gpus, x.global_batch);
    ModelSpec m = small_model();
    m.global_batch = x.global_batch;
    const auto plan = plan_parallelism(m, x.gpus);
    REQUIRE(plan.is_ok());
    CHECK(x.samples_per_s == static_cast<double>(x.global_batch) / plan->front().step_seconds());
    CHECK(x.config == plan->front().config);
  }
  for (int n = 1; n <= 4; ++n)
    for (int64_t b : {8, 16}) {
      ModelSpec m = small_model();
      m.global_batch = b;
      if (plan_parallelism(m, n).is_ok()) want.emplace_back(n, b);
    }
  CHECK(got == want);
  CHECK(got.size() == 8);  // 1..4 GPUs all fit small_model at both batches
  // Without a batch range the model's own global_batch is the option's.
  g.batch.reset();
  auto plain = job_options(g, 64);
  REQUIRE(plain.is_ok());
  for (const auto& x : *plain) CHECK(x.global_batch == small_model().global_batch);
}
