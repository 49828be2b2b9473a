#include "ptc/planner/makespan.h"

#include <catch2/catch.hpp>

#include <numeric>

#include "makespan_support.h"

using namespace ptcfs;
using namespace ptcfs::planner;
using ptcfs::planner::testing::expect_valid_schedule;
using ptcfs::planner::testing::timed;

TEST_CASE("timed_options: run time is samples over rate; options beaten on GPUs and time are dropped", "[makespan]") {
  JobSpec j;
  j.name = "bert";
  j.min_gpus = 1;
  j.max_gpus = 8;
  j.samples = 1200;
  j.points = {{1, 100}, {2, 200}, {3, 150}, {4, 400}, {8, 300}};
  auto r = timed_options({j}, 6);
  REQUIRE(r.is_ok());
  REQUIRE(r->size() == 1);
  const auto& o = (*r)[0];
  REQUIRE(o.size() == 3);  // 3 GPUs (8 s) is beaten by 2 (6 s); 8 GPUs is more than 6
  CHECK(o[0].option.gpus == 1);
  CHECK(o[0].seconds == 12.0);
  CHECK(o[1].option.gpus == 2);
  CHECK(o[1].seconds == 6.0);
  CHECK(o[2].option.gpus == 4);
  CHECK(o[2].seconds == 3.0);
}

TEST_CASE("timed_options: a job without samples, too wide or never running is refused by name", "[makespan]") {
  JobSpec j;
  j.name = "gpt";
  j.min_gpus = 2;
  j.max_gpus = 4;
  j.points = {{2, 10}};
  auto r = timed_options({j}, 4);
  REQUIRE_FALSE(r.is_ok());
  CHECK_THAT(r.status().message(), Catch::Contains("job 'gpt' lacks 'samples'"));
  j.samples = 100;
  r = timed_options({j}, 1);
  REQUIRE_FALSE(r.is_ok());
  CHECK_THAT(r.status().message(), Catch::Contains("job 'gpt' asks for at least 2 GPUs, more than the 1 there are"));
  j.points = {{2, 0}};
  r = timed_options({j}, 4);
  REQUIRE_FALSE(r.is_ok());
  CHECK_THAT(r.status().message(), Catch::Contains("job 'gpt' trains at 0 samples/s"));
  CHECK_FALSE(timed_options({j}, 0).is_ok());
}

TEST_CASE("serial schedule: each job at the earliest time its GPUs are free, lowest ids first", "[makespan]") {
  // 4 GPUs. a: 3 GPUs for 5 s; b: 2 GPUs for 2 s; c: 1 GPU for 4 s.
  const std::vector<std::vector<TimedOption>> options{{timed(3, 5)}, {timed(2, 2)}, {timed(1, 4)}};
  const std::vector<std::string> names{"a", "b", "c"};
  const Schedule s = serial_schedule(names, options, {0, 0, 0}, {0, 1, 2}, 4);
  REQUIRE(s.jobs.size() == 3);
  CHECK(s.jobs[0].start_s == 0);
  CHECK(s.jobs[0].gpu_ids == std::vector<int>{0, 1, 2});
  CHECK(s.jobs[1].start_s == 5);  // a holds 3 of 4 until 5
  CHECK(s.jobs[1].gpu_ids == std::vector<int>{0, 1});
  CHECK(s.jobs[2].start_s == 0);  // c fits beside a
  CHECK(s.jobs[2].gpu_ids == std::vector<int>{3});
  CHECK(s.makespan_s == 7);
  expect_valid_schedule(s, 4);
  // The other order: b first, then a must wait for b, and c goes beside b.
  const Schedule t = serial_schedule(names, options, {0, 0, 0}, {1, 0, 2}, 4);
  CHECK(t.jobs[1].start_s == 0);
  CHECK(t.jobs[0].start_s == 2);
  CHECK(t.jobs[2].start_s == 0);
  CHECK(t.jobs[2].gpu_ids == std::vector<int>{2});
  CHECK(t.makespan_s == 7);
  expect_valid_schedule(t, 4);
}

TEST_CASE("serial schedule: a job does not start in a gap too short for it", "[makespan]") {
  // 2 GPUs. a: 2 GPUs 0-1 then free; b: 1 GPU 1-3; c: 2 GPUs for 1 s starts at 3 (the
  // gap at 1-3 has only 1 free GPU), d: 1 GPU for 2 s fits at 1 beside b.
  const std::vector<std::vector<TimedOption>> options{{timed(2, 1)}, {timed(1, 2)}, {timed(2, 1)}, {timed(1, 2)}};
  const Schedule s = serial_schedule({"a", "b", "c", "d"}, options, {0, 0, 0, 0}, {0, 1, 2, 3}, 2);
  CHECK(s.jobs[1].start_s == 1);
  CHECK(s.jobs[2].start_s == 3);
  CHECK(s.jobs[3].start_s == 1);
  CHECK(s.makespan_s == 4);
  expect_valid_schedule(s, 2);
}

TEST_CASE("makespan program: one start per job, the greedy schedule as a feasible start, horizon = its length",
          "[makespan]") {
  const std::vector<std::vector<TimedOption>> options{{timed(1, 4), timed(2, 3)}, {timed(2, 2)}, {timed(1, 3)}};
  auto m = makespan_milp(options, 2, 1.0);
  REQUIRE(m.is_ok());
  const Schedule greedy = greedy_schedule({"a", "b", "c"}, options, 2);
  CHECK(m->slots == static_cast<int>(greedy.makespan_s));
  // Columns: for each job and option, one per start slot that ends within the horizon, then C.
  size_t expected = 1;
  for (const auto& job : options)
    for (const auto& o : job) expected += static_cast<size_t>(m->slots - static_cast<int>(o.seconds) + 1);
  CHECK(m->milp.columns.size() == expected);
  CHECK(m->makespan_column == static_cast<int>(expected) - 1);
  CHECK(m->durations == std::vector<std::vector<int>>{{4, 3}, {2}, {3}});
  CHECK(milp_feasible(m->milp, m->start));
  CHECK(m->start[static_cast<size_t>(m->makespan_column)] == m->slots);
  // The start decodes back to a schedule no longer than the greedy one.
  auto s = schedule_from_solution(*m, {"a", "b", "c"}, options, 2, m->start);
  REQUIRE(s.is_ok());
  CHECK(s->makespan_s <= greedy.makespan_s);
  expect_valid_schedule(*s, 2);
}

TEST_CASE("makespan program: run times round up to whole slots; too many variables is refused", "[makespan]") {
  const std::vector<std::vector<TimedOption>> options{{timed(1, 2.5)}, {timed(1, 0.2)}};
  auto m = makespan_milp(options, 1, 1.0);
  REQUIRE(m.is_ok());
  CHECK(m->durations == std::vector<std::vector<int>>{{3}, {1}});
  CHECK(m->slots == 4);
  auto big = makespan_milp(options, 1, 0.001, 1000);
  REQUIRE_FALSE(big.is_ok());
  CHECK_THAT(big.status().message(), Catch::Contains("use fewer, longer slots"));
  CHECK_FALSE(makespan_milp(options, 1, 0).is_ok());
  // Few variables but terms growing as slots squared (allocate --slots 20000 ran out of memory):
  // 12,500 + 1,000 = 13,500 slots; 1 + 1,001 + 12,501 variables; 1,001 x (3 + 12,500) + 12,501 x
  // (3 + 1,000) = 25,054,006 terms, x 48 bytes (+ 64 a variable) = 1,147 MiB: refused unbuilt.
  auto square = makespan_milp(options, 1, 0.0002);
  REQUIRE_FALSE(square.is_ok());
  CHECK_THAT(square.status().message(),
             Catch::Contains("13503 variables and 25054006 terms (about 1147 MiB to build and solve)") &&
                 Catch::Contains("use fewer, longer slots (--slots)"));
}

TEST_CASE("schedule_from_solution refuses a solution that starts a job twice or never", "[makespan]") {
  const std::vector<std::vector<TimedOption>> options{{timed(1, 1)}, {timed(1, 1)}};
  auto m = makespan_milp(options, 1, 1.0);
  REQUIRE(m.is_ok());
  std::vector<double> none(m->milp.columns.size(), 0.0);
  auto r = schedule_from_solution(*m, {"a", "b"}, options, 1, none);
  REQUIRE_FALSE(r.is_ok());
  CHECK_THAT(r.status().message(), Catch::Contains("never starts job 'a'"));
  std::vector<double> twice = none;
  twice[0] = twice[1] = 1;  // job a at slots 0 and 1
  r = schedule_from_solution(*m, {"a", "b"}, options, 1, twice);
  REQUIRE_FALSE(r.is_ok());
  CHECK_THAT(r.status().message(), Catch::Contains("starts job 'a' twice"));
  CHECK_FALSE(schedule_from_solution(*m, {"a", "b"}, options, 1, {1.0}).is_ok());
}

TEST_CASE("JOBS.json: samples must be a positive number", "[makespan]") {
  auto ok = parse_jobs_json(R"({"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 2, "samples": 1e6,
                                           "throughput": {"1": 10}}]})",
                            "JOBS.json");
  REQUIRE(ok.is_ok());
  CHECK((*ok)[0].samples == 1e6);
  auto bad = parse_jobs_json(R"({"jobs": [{"name": "a", "min_gpus": 1, "max_gpus": 2, "samples": -3,
                                            "throughput": {"1": 10}}]})",
                             "JOBS.json");
  REQUIRE_FALSE(bad.is_ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("('a'): samples must be a number of samples > 0, got -3"));
}
