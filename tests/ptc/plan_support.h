// Test support for the make_plan tests (plan_test.cc, plan_property_test.cc):
//
// - fixtures that build a Ptc, Layout or Plan and REQUIRE that it succeeds;
// - plans as rows of plain integers, for exact comparison;
// - an oracle that cuts the expected bytes of every slice from full tensors, and a reference
//   executor that carries a plan out with memcpy and memset;
// - a write counter (plan_problem) that checks everything a plan promises short of its bytes;
// - generators of random PTCs, configs and node holdings.
//
// The fixtures and generators use Catch2 assertions, so call them only from inside a test.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ptc/plan.h"

namespace plan_support {

// ---------------------------------------------------------------------------------------
// Fixtures

// A PTC (tp = pp = dp = 1) with the given "tensors" JSON object and num_layers.
ptcfs::ptc::Ptc ptc_of(const std::string& tensors_json, int layers = 0);
ptcfs::ptc::Layout layout_of(const ptcfs::ptc::Ptc& p, int tp, int pp = 1, int dp = 1);
ptcfs::ptc::Plan plan_of(const ptcfs::ptc::Layout& from, const ptcfs::ptc::Layout& to, const ptcfs::ptc::Holdings& h);
// With Holdings::single_node(from, to).
ptcfs::ptc::Plan plan_of(const ptcfs::ptc::Layout& from, const ptcfs::ptc::Layout& to);

// A copy as {tensor, src_shard, src_slice, dst_shard, dst_slice, src_node, src_lo, dst_lo, len}.
using CopyRow = std::array<int64_t, 9>;
// A fill as {tensor, dst_shard, dst_slice, dst_lo, len}.
using FillRow = std::array<int64_t, 5>;

std::vector<CopyRow> copy_rows(const ptcfs::ptc::Plan& p);
std::vector<FillRow> fill_rows(const ptcfs::ptc::Plan& p);

// Every field of two plans, compared.
bool same_plan(const ptcfs::ptc::Plan& a, const ptcfs::ptc::Plan& b);

// ---------------------------------------------------------------------------------------
// The oracle and the reference executor. A layout's bytes are kept per shard
// (layout.shards() order), per slice (layout.slices(shard) order).

using Bytes = std::vector<std::byte>;
using Buffers = std::vector<std::vector<Bytes>>;

// The full logical tensors of `p`, in p.tensors order, filled with a hash of (tensor, offset)
// so that a byte that lands in the wrong place (another element, another byte of the element,
// another tensor) almost surely differs.
std::vector<Bytes> full_tensors(const ptcfs::ptc::Ptc& p);

// What every slice of `l` must hold: its pieces cut from the full tensors, padding zero.
Buffers oracle(const ptcfs::ptc::Layout& l, const std::vector<Bytes>& full);

// Carries out a plan with memcpy and memset. Destination bytes start as 0xCD so that a byte
// the plan forgets shows. Call only on plans plan_problem() accepts (runs are not bounds-checked).
Buffers apply(const ptcfs::ptc::Layout& from, const ptcfs::ptc::Layout& to, const ptcfs::ptc::Plan& plan,
              const Buffers& src);

// "" when equal, else where the first difference is.
std::string first_difference(const ptcfs::ptc::Layout& l, const Buffers& got, const Buffers& want);

// ---------------------------------------------------------------------------------------
// The write counter: everything a plan promises that can be checked without its bytes.
// Returns "" when the plan keeps its promises, else the first broken one.
//
// - indices are in range, and a copy's tensor is the tensor of both its slices;
// - every position of a copy maps to the same global element on both sides, and a copy is
//   maximal (it ends where its source piece or its destination piece ends);
// - every run lies inside its source and destination slices; every destination byte is
//   written exactly once by copies and fills together;
// - copies and fills are ordered by destination shard, slice, position;
// - byte counts add up; a copy's src_node holds its shard; no remote copy moves an element
//   that a source on the destination's node holds;
// - with `single_node`, the source chosen at the start of each copy is the destination's own
//   shard id when it covers that element, else the lowest covering shard index.
std::string plan_problem(const ptcfs::ptc::Layout& from, const ptcfs::ptc::Layout& to, const ptcfs::ptc::Holdings& h,
                         const ptcfs::ptc::Plan& plan, bool single_node);
// With Holdings::single_node(from, to) and single_node = true.
std::string plan_problem(const ptcfs::ptc::Layout& from, const ptcfs::ptc::Layout& to, const ptcfs::ptc::Plan& plan);

// ---------------------------------------------------------------------------------------
// Random PTCs and configs. Every generator is deterministic given the Rng's seed.

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(g_); }
  template <class T>
  T pick(std::initializer_list<T> xs) {
    return *(xs.begin() + uniform(0, static_cast<int>(xs.size()) - 1));
  }

 private:
  std::mt19937_64 g_;
};

// 1-4 tensors of rank 0-3 with small dimensions (occasionally 0): replicated, split, split
// into fused parts, or split with padding; placed on the first, last or every stage, a stage
// list, or by layer. Only PTCs the parser accepts (REQUIREd).
ptcfs::ptc::Ptc random_ptc(Rng& rng);

// A random config Layout::make accepts (tp in {1, 2, 4, 8}, pp <= num_layers, dp 1-3), or none.
std::optional<ptcfs::ptc::Layout> random_layout(Rng& rng, const ptcfs::ptc::Ptc& p);

// The PTC as JSON and the layouts' configs, for INFO.
std::string describe(const ptcfs::ptc::Ptc& p, std::initializer_list<const ptcfs::ptc::Layout*> ls);

// Each source shard on a random set of nodes (empty with probability p_unheld), each
// destination shard on a random node.
ptcfs::ptc::Holdings random_holdings(Rng& rng, const ptcfs::ptc::Layout& from, const ptcfs::ptc::Layout& to, int nodes,
                                     double p_unheld);

// Whether some destination element is held by no held source.
bool some_element_unheld(const ptcfs::ptc::Layout& from, const ptcfs::ptc::Layout& to, const ptcfs::ptc::Holdings& h);

}  // namespace plan_support
