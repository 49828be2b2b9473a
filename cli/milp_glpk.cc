#include "cli/milp_glpk.h"

#include <glpk.h>

#include <cmath>
#include <memory>

namespace ptcfs::cli {

namespace {

struct Search {
  const std::vector<double>* start = nullptr;
  bool start_given = false;
  double bound = -INFINITY;
};

// Branch and cut calls this at each step: hand GLPK the starting solution at the first
// heuristic call, and keep the best bound proven so far.
void on_search(glp_tree* tree, void* info) {
  auto* s = static_cast<Search*>(info);
  if (glp_ios_reason(tree) == GLP_IHEUR && s->start && !s->start_given) {
    s->start_given = true;
    std::vector<double> x(s->start->size() + 1);
    std::copy(s->start->begin(), s->start->end(), x.begin() + 1);
    (void)glp_ios_heur_sol(tree, x.data());  // refused only when GLPK already has a better one
  }
  // Node bounds never fall below the root's LP bound (during cut generation GLPK may report
  // -DBL_MAX for a node not yet bounded).
  if (int node = glp_ios_best_node(tree); node != 0) s->bound = std::max(s->bound, glp_ios_node_bound(tree, node));
}

int row_type(double lo, double hi) {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi) return lo == hi ? GLP_FX : GLP_DB;
  if (has_lo) return GLP_LO;
  if (has_hi) return GLP_UP;
  return GLP_FR;
}

int ms_left(std::chrono::steady_clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(1, left.count()));
}

}  // namespace

Result<MilpAnswer> solve_milp_glpk(const planner::Milp& m, std::chrono::milliseconds limit,
                                   const std::vector<double>& start) {
  if (!start.empty() && start.size() != m.columns.size())
    return invalid("the starting solution has " + std::to_string(start.size()) + " values for " +
                   std::to_string(m.columns.size()) + " variables");
  const auto t0 = std::chrono::steady_clock::now();
  const auto until = t0 + limit;
  glp_term_out(GLP_OFF);
  std::unique_ptr<glp_prob, decltype(&glp_delete_prob)> lp(glp_create_prob(), &glp_delete_prob);
  glp_set_obj_dir(lp.get(), GLP_MIN);
  const int ncols = static_cast<int>(m.columns.size()), nrows = static_cast<int>(m.rows.size());
  if (ncols > 0) glp_add_cols(lp.get(), ncols);
  if (nrows > 0) glp_add_rows(lp.get(), nrows);
  for (int c = 0; c < ncols; ++c) {
    const auto& col = m.columns[static_cast<size_t>(c)];
    glp_set_col_bnds(lp.get(), c + 1, row_type(col.lo, col.hi), col.lo, col.hi);
    glp_set_col_kind(lp.get(), c + 1, col.integer ? GLP_IV : GLP_CV);
    glp_set_obj_coef(lp.get(), c + 1, col.cost);
  }
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0};
  for (int r = 0; r < nrows; ++r) {
    const auto& row = m.rows[static_cast<size_t>(r)];
    glp_set_row_bnds(lp.get(), r + 1, row_type(row.lo, row.hi), row.lo, row.hi);
    for (const auto& [c, a] : row.terms) {
      ia.push_back(r + 1);
      ja.push_back(c + 1);
      ar.push_back(a);
    }
  }
  glp_load_matrix(lp.get(), static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());

  glp_smcp lp_parm;
  glp_init_smcp(&lp_parm);
  lp_parm.msg_lev = GLP_MSG_OFF;
  lp_parm.tm_lim = ms_left(until);
  const int lp_ret = glp_simplex(lp.get(), &lp_parm);
  if (lp_ret == 0 && glp_get_status(lp.get()) == GLP_NOFEAS) return invalid("the program has no solution");

  MilpAnswer a;
  a.solver = std::string("GLPK ") + glp_version();
  Search search{start.empty() ? nullptr : &start};
  if (lp_ret == 0 && glp_get_status(lp.get()) == GLP_OPT) {
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_OFF;  // the callback's starting solution is for the program as given
    // GLPK's default heuristics and cuts: on these time-indexed programs, its feasibility pump,
    // proximity search and cut generators cost more time than they save (docs/PLANNER.md).
    parm.tm_lim = ms_left(until);
    parm.cb_func = on_search;
    parm.cb_info = &search;
    search.bound = glp_get_obj_val(lp.get());
    (void)glp_intopt(lp.get(), &parm);  // its status below says what came of it
  }
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int status = glp_mip_status(lp.get());
  if (status == GLP_NOFEAS) return invalid("the program has no solution");
  if (status == GLP_OPT || status == GLP_FEAS) {
    a.optimal = status == GLP_OPT;
    a.objective = glp_mip_obj_val(lp.get());
    a.values.resize(m.columns.size());
    for (int c = 0; c < ncols; ++c) a.values[static_cast<size_t>(c)] = glp_mip_col_val(lp.get(), c + 1);
  } else if (!start.empty()) {
    // The limit came before branch and cut found (or was given) anything: the start stands.
    a.values = start;
    for (size_t c = 0; c < start.size(); ++c) a.objective += m.columns[c].cost * start[c];
  } else {
    return unavailable("GLPK found no solution within " + std::to_string(limit.count()) + " ms");
  }
  a.bound = a.optimal ? a.objective : std::min(a.objective, search.bound);
  a.gap = a.optimal || a.objective == 0 ? 0 : (a.objective - a.bound) / std::abs(a.objective);
  return a;
}

}  // namespace ptcfs::cli
