#include "ptc/planner/allocator.h"

#include <catch2/catch.hpp>

#include <functional>
#include <initializer_list>
#include <random>
#include <string>

#include "model_fixtures.h"
#include "ptc/planner/planner.h"

using namespace ptc;
using ptc::testing::small_model;

namespace {

const std::string kFile = "JOBS.json";

JobSpec measured(const std::string& name, int lo, int hi, std::vector<std::pair<int, double>> points) {
  JobSpec j;
  j.name = name;
  j.min_gpus = lo;
  j.max_gpus = hi;
  j.points = std::move(points);
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
  CHECK(bert.points == std::vector<std::pair<int, double>>{{1, 210.5}, {2, 400}, {4, 760}, {8, 1300}});
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
                 {"throughput[\"1\"] must be a number of samples/s >= 0, got -3"});
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
          o.push_back({g, std::uniform_real_distribution<double>(0, 100)(rng), std::nullopt});
      if (o.empty()) o.push_back({std::uniform_int_distribution<int>(1, 16)(rng), 1.5, std::nullopt});
    }
    INFO("round " << round << ": " << jobs << " jobs on " << gpus << " GPUs");
    const double want = brute_force(options, gpus);
    const auto got = max_total_throughput(options, gpus);
    if (want < 0) {
      CHECK_FALSE(got);
      continue;
    }
    REQUIRE(got);
    double total = 0;
    int used = 0;
    for (size_t j = 0; j < options.size(); ++j) {
      total += options[j][(*got)[j]].samples_per_s;
      used += options[j][(*got)[j]].gpus;
    }
    CHECK(total == want);
    CHECK(used <= gpus);
    ++feasible;
  }
  CHECK(feasible > 500);
}
