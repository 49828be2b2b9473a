// Test helpers for the makespan policy: options made by hand, a schedule's validity, and the
// optimum by brute force.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "ptc/planner/makespan.h"

namespace ptcfs::planner::testing {

inline TimedOption timed(int gpus, double seconds) { return {JobOption{gpus, 1.0 / seconds, std::nullopt}, seconds}; }

// Every job runs its option's time on exactly its GPU count of distinct ids in [0, gpus), and
// no GPU runs two jobs at once.
inline void expect_valid_schedule(const Schedule& s, int gpus) {
  double last = 0;
  for (size_t a = 0; a < s.jobs.size(); ++a) {
    const auto& ja = s.jobs[a];
    INFO("job " << ja.name);
    CHECK(ja.start_s >= 0);
    CHECK(ja.end_s == ja.start_s + ja.option.seconds);
    CHECK(ja.gpu_ids.size() == static_cast<size_t>(ja.option.option.gpus));
    CHECK(std::set<int>(ja.gpu_ids.begin(), ja.gpu_ids.end()).size() == ja.gpu_ids.size());
    for (int id : ja.gpu_ids) CHECK((id >= 0 && id < gpus));
    last = std::max(last, ja.end_s);
    for (size_t b = a + 1; b < s.jobs.size(); ++b) {
      const auto& jb = s.jobs[b];
      const bool overlap = ja.start_s < jb.end_s && jb.start_s < ja.end_s;
      if (!overlap) continue;
      for (int id : ja.gpu_ids) {
        INFO("jobs " << ja.name << " and " << jb.name << " overlap in time");
        CHECK(std::find(jb.gpu_ids.begin(), jb.gpu_ids.end(), id) == jb.gpu_ids.end());
      }
    }
  }
  CHECK(s.makespan_s == last);
}

// The shortest makespan over every choice of options and every order of the serial
// schedule generation scheme, whose schedules include an optimal one (the active schedules;
// Kolisch 1996).
inline double brute_force_makespan(const std::vector<std::vector<TimedOption>>& options, int gpus) {
  const size_t n = options.size();
  const std::vector<std::string> names(n);
  double best = std::numeric_limits<double>::infinity();
  std::vector<size_t> picked(n, 0);
  std::function<void(size_t)> choose = [&](size_t j) {
    if (j == n) {
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      do best = std::min(best, serial_schedule(names, options, picked, order, gpus).makespan_s);
      while (std::next_permutation(order.begin(), order.end()));
      return;
    }
    for (size_t o = 0; o < options[j].size(); ++o) {
      picked[j] = o;
      choose(j + 1);
    }
  };
  choose(0);
  return best;
}

}  // namespace ptcfs::planner::testing
