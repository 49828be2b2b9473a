#include "cli/milp_glpk.h"

#include <catch2/catch.hpp>

#include <random>

#include "../ptc/planner/makespan_support.h"
#include "ptc/planner/makespan.h"

using namespace ptcfs;
using namespace ptcfs::planner;
using ptcfs::cli::solve_milp_glpk;
using ptcfs::planner::testing::brute_force_makespan;
using ptcfs::planner::testing::expect_valid_schedule;
using ptcfs::planner::testing::timed;

namespace {

constexpr auto kLimit = std::chrono::seconds(30);

}  // namespace

TEST_CASE("GLPK solves a small program to its known optimum", "[glpk]") {
  // max 3a + 2b with a + b <= 4, a + 3b <= 6, a <= 3, integers: a = 3, b = 1, objective 11.
  Milp m;
  const int a = m.add_column({"a", 0, 3, true, -3});
  const int b = m.add_column({"b", 0, 10, true, -2});
  m.rows.push_back({"r1", {{a, 1}, {b, 1}}, -INFINITY, 4});
  m.rows.push_back({"r2", {{a, 1}, {b, 3}}, -INFINITY, 6});
  auto r = solve_milp_glpk(m, kLimit);
  REQUIRE(r.is_ok());
  CHECK(r->optimal);
  CHECK(r->objective == Approx(-11));
  CHECK(r->gap == 0);
  CHECK(r->values[static_cast<size_t>(a)] == Approx(3));
  CHECK(r->values[static_cast<size_t>(b)] == Approx(1));
  CHECK_THAT(r->solver, Catch::StartsWith("GLPK "));
}

TEST_CASE("GLPK: a program with no solution is refused; a start of the wrong size too", "[glpk]") {
  Milp m;
  const int a = m.add_column({"a", 0, 1, true, 1});
  m.rows.push_back({"r", {{a, 1}}, 2, INFINITY});
  auto r = solve_milp_glpk(m, kLimit);
  REQUIRE_FALSE(r.is_ok());
  CHECK_THAT(r.status().message(), Catch::Contains("no solution"));
  CHECK_FALSE(solve_milp_glpk(m, kLimit, {1.0, 2.0}).is_ok());
}

TEST_CASE("makespan: the MILP's schedule equals brute force on random tiny instances and never shares a GPU",
          "[glpk][makespan]") {
  std::mt19937 rng(20261124);
  int beat_greedy = 0;  // rounds where the optimum is shorter than the greedy schedule
  for (int round = 0; round < 200; ++round) {
    const int gpus = std::uniform_int_distribution<int>(1, 6)(rng);
    const size_t jobs = std::uniform_int_distribution<size_t>(2, 5)(rng);
    std::vector<std::vector<TimedOption>> options(jobs);
    for (auto& job : options) {
      // Options widening and getting faster, whole seconds (so 1 s slots are exact).
      int g = std::uniform_int_distribution<int>(1, gpus)(rng);
      int sec = std::uniform_int_distribution<int>(2, 9)(rng);
      const int count = std::uniform_int_distribution<int>(1, 3)(rng);
      for (int k = 0; k < count && g <= gpus && sec >= 1; ++k) {
        job.push_back(timed(g, sec));
        g += std::uniform_int_distribution<int>(1, 2)(rng);
        sec -= std::uniform_int_distribution<int>(1, 3)(rng);
      }
    }
    std::vector<std::string> names;
    for (size_t j = 0; j < jobs; ++j) names.push_back("job" + std::to_string(j));
    INFO("round " << round << ", " << jobs << " jobs on " << gpus << " GPUs");
    auto m = makespan_milp(options, gpus, 1.0);
    REQUIRE(m.is_ok());
    auto r = solve_milp_glpk(m->milp, kLimit, m->start);
    REQUIRE(r.is_ok());
    REQUIRE(r->optimal);
    CHECK(milp_feasible(m->milp, r->values));
    auto s = schedule_from_solution(*m, names, options, gpus, r->values);
    REQUIRE(s.is_ok());
    expect_valid_schedule(*s, gpus);
    const double best = brute_force_makespan(options, gpus);
    CHECK(s->makespan_s == best);
    CHECK(r->objective == Approx(best));
    if (best < greedy_schedule(names, options, gpus).makespan_s) ++beat_greedy;
  }
  CHECK(beat_greedy >= 20);
}

TEST_CASE("makespan: a time limit too short for the proof keeps the start and reports a gap", "[glpk][makespan]") {
  // 12 jobs on 8 GPUs in fine slots: far more than 1 ms of branch and cut.
  std::vector<std::vector<TimedOption>> options;
  std::vector<std::string> names;
  for (int j = 0; j < 12; ++j) {
    options.push_back({timed(1, 10 + j), timed(2, 6 + j), timed(4, 4 + j)});
    names.push_back("j" + std::to_string(j));
  }
  auto m = makespan_milp(options, 8, 0.5);
  REQUIRE(m.is_ok());
  auto r = solve_milp_glpk(m->milp, std::chrono::milliseconds(1), m->start);
  REQUIRE(r.is_ok());
  CHECK_FALSE(r->optimal);
  CHECK(milp_feasible(m->milp, r->values));
  CHECK(r->objective <= m->slots);
  CHECK(r->gap > 0);
  auto s = schedule_from_solution(*m, names, options, 8, r->values);
  REQUIRE(s.is_ok());
  expect_valid_schedule(*s, 8);
}
