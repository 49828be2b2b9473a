// Benchmark: the planner and the allocator at scale (issue 14's budgets: `plan` for a
// 1T-parameter model on 4,096 GPUs, every candidate, under 1 s; `allocate --policy
// throughput` for 100 jobs on 1,024 GPUs under 1 s).
//
// plan: Narayanan et al. 2021's 1T GPT (128 layers, hidden 25,600, 160 heads, batch 3,072)
// with selective recomputation and a distributed optimizer, on 4,096 A100s; plan_parallelism
// (memory of every valid configuration, step time of those that fit, sorted), and separately
// the cost model run on every valid configuration, fitting or not.
// allocate: 100 jobs with a measured point at every GPU count of their range (a random
// range of 1 to 256 GPUs, a concave random curve): the dynamic program's worst case for its
// options. Each is timed 5 times; the median is reported.
//
// Usage: ptcfs_bench_planner [--json FILE]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "ptc/planner/allocator.h"
#include "ptc/planner/planner.h"

namespace {

using namespace ptcfs;
using namespace ptcfs::planner;

template <class F>
double median_seconds(F&& f) {
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const double t0 = ptcfs::bench::now_s();
    f();
    t.push_back(ptcfs::bench::now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

ModelSpec one_trillion() {
  ModelSpec m;
  m.layers = 128;
  m.hidden = 25600;
  m.heads = 160;
  m.query_groups = 160;
  m.ffn = 4 * 25600;
  m.vocab = 51200;
  m.seq = 2048;
  m.global_batch = 3072;
  m.recompute = Recompute::kSelective;
  m.distributed_optimizer = true;
  m.gpu = {80, 312, 8, 2400, 200};
  return m;
}

std::vector<JobSpec> hundred_jobs() {
  std::mt19937 rng(100);
  std::vector<JobSpec> jobs;
  for (int i = 0; i < 100; ++i) {
    JobSpec j;
    j.name = "job" + std::to_string(i);
    j.min_gpus = std::uniform_int_distribution<int>(1, 8)(rng);
    j.max_gpus = j.min_gpus + std::uniform_int_distribution<int>(0, 248)(rng);
    const double rate = std::uniform_real_distribution<double>(10, 1000)(rng);
    const double exponent = std::uniform_real_distribution<double>(0.5, 0.95)(rng);
    for (int g = j.min_gpus; g <= j.max_gpus; ++g) j.points.emplace_back(g, rate * std::pow(g, exponent));
    jobs.push_back(std::move(j));
  }
  return jobs;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ptcfs_bench_planner: the planner on 4,096 GPUs and the allocator on 1,024"};
  std::string out;
  app.add_option("--json", out, "Write the results here");
  CLI11_PARSE(app, argc, argv);

  const ModelSpec m = one_trillion();
  size_t fit = 0;
  const double plan_s = median_seconds([&] {
    auto r = plan_parallelism(m, 4096);
    fit = r ? r->size() : 0;
  });
  const std::vector<ParallelConfig> valid = valid_configs(m, 4096);
  double sink = 0;
  const double all_s = median_seconds([&] {
    for (const auto& c : valid) sink += evaluate(m, c).step.total();
  });

  const std::vector<JobSpec> jobs = hundred_jobs();
  size_t options = 0;
  for (const auto& j : jobs) options += j.points.size();
  double total = 0;
  const double allocate_s = median_seconds([&] {
    auto r = allocate_throughput(jobs, 1024);
    total = r ? r->samples_per_s : -1;
  });

  std::printf(
      "plan: 1T GPT on 4,096 GPUs: %zu valid configurations, %zu fit: %.3f ms (every candidate through the "
      "cost model: %.3f ms)\n",
      valid.size(), fit, plan_s * 1e3, all_s * 1e3);
  std::printf("allocate: 100 jobs (%zu options) on 1,024 GPUs: %.3f ms (%.1f samples/s in all)\n", options,
              allocate_s * 1e3, total);
  if (!out.empty()) {
    nlohmann::json j = {{"plan_gpus", 4096},     {"plan_valid", valid.size()},      {"plan_fit", fit},
                        {"plan_s", plan_s},      {"plan_every_candidate_s", all_s}, {"allocate_jobs", jobs.size()},
                        {"allocate_gpus", 1024}, {"allocate_options", options},     {"allocate_s", allocate_s},
                        {"checksum", sink}};
    std::ofstream(out) << j.dump(2) << "\n";
  }
  return 0;
}
