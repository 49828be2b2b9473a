// Solves a planner::Milp (ptc/planner/milp.h) with GLPK (Debian's libglpk, through its C API): the LP
// relaxation by the simplex method, then branch and cut, within a time limit. A feasible
// starting solution, when given, is handed to GLPK as its first incumbent, so a run stopped
// by the limit still has a solution and a gap.
//
// Thread-safety: GLPK keeps per-thread state; one solve at a time per thread.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "ptc/base/status.h"
#include "ptc/planner/milp.h"

namespace ptcfs::cli {

struct MilpAnswer {
  std::vector<double> values;  // one per column: the best solution found
  double objective = 0;        // its value
  double bound = 0;            // the best lower bound proven (= objective when optimal)
  double gap = 0;              // (objective - bound) / |objective|, 0 when optimal
  bool optimal = false;        // proven optimal; else the time limit stopped the search
  double seconds = 0;          // the solver's wall time
  std::string solver;          // "GLPK 5.0"
};

// kUnavailable when no solution was found within the limit (and none was given);
// kInvalidArgument when the program has none.
Result<MilpAnswer> solve_milp_glpk(const planner::Milp& m, std::chrono::milliseconds limit,
                                   const std::vector<double>& start = {});

}  // namespace ptcfs::cli
