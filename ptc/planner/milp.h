// A mixed-integer linear program as data. ptc/ builds programs (makespan.h) and reads their
// solutions; a solver outside ptc/ (cli/milp_glpk.h, GLPK) solves them, so the model stays
// pure and testable and the solver can change without touching it.
//
//   minimise  sum_c cost[c] * x[c]
//   subject to  lo[r] <= sum_(c, a) in terms[r] a * x[c] <= hi[r]   for every row r
//               col.lo <= x[c] <= col.hi, x[c] integer where col.integer
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace ptcfs::planner {

struct MilpColumn {
  std::string name;
  double lo = 0, hi = 1;
  bool integer = true;
  double cost = 0;
};

struct MilpRow {
  std::string name;
  std::vector<std::pair<int, double>> terms;  // (column index, coefficient); each column at most once
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
};

struct Milp {
  std::vector<MilpColumn> columns;
  std::vector<MilpRow> rows;

  int add_column(MilpColumn c) {
    columns.push_back(std::move(c));
    return static_cast<int>(columns.size()) - 1;
  }
};

// Whether `x` satisfies every bound, row and integrality of `m` (within `tolerance`).
inline bool milp_feasible(const Milp& m, const std::vector<double>& x, double tolerance = 1e-6) {
  if (x.size() != m.columns.size()) return false;
  for (size_t c = 0; c < x.size(); ++c) {
    const auto& col = m.columns[c];
    if (x[c] < col.lo - tolerance || x[c] > col.hi + tolerance) return false;
    if (col.integer && std::abs(x[c] - static_cast<double>(static_cast<long long>(x[c] + 0.5))) > tolerance)
      return false;
  }
  for (const auto& r : m.rows) {
    double sum = 0;
    for (const auto& [c, a] : r.terms) sum += a * x[static_cast<size_t>(c)];
    if (sum < r.lo - tolerance || sum > r.hi + tolerance) return false;
  }
  return true;
}

}  // namespace ptcfs::planner
