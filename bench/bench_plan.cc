// Benchmark: planning a repartition of 100,000 tensors on 1,024 GPUs (docs/BENCHMARKS.md "Budgets":
// under a second, memory linear in the plan).
//
// The PTC is a mixture-of-experts model: `layers` layers of `per_layer` tensors (column- and
// row-parallel matrices, fused parts, replicated norms), plus a padded embedding. Timed,
// each on its own: the two layouts, the single-node plan (make_plan), and on a cluster of
// 128 nodes of 8 GPUs, the cluster plan (make_cluster_plan) and bytes_min computed on its
// own. Memory: the most heap in use while planning (sampled every millisecond) above what
// was in use before, against the bytes the plan's vectors hold.
//
// Usage: ptcfs_bench_plan [--tensors 100000] [--json FILE]
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <thread>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "ptc/cluster.h"
#include "ptc/cluster_plan.h"
#include "ptc/plan.h"

namespace {

using namespace ptcfs;
using namespace ptcfs::ptc;
using nlohmann::json;

std::string moe_ptc_json(int layers, int per_layer, Parallelism par) {
  json tensors = json::object();
  const int64_t h = 1024;
  tensors["embedding.word_embeddings.weight"] = {
      {"dtype", "BF16"}, {"shape", {50257, h}}, {"tp_dim", 0}, {"pad_to", 128}, {"stage", "first"}};
  tensors["final_layernorm.weight"] = {{"dtype", "F32"}, {"shape", {h}}, {"stage", "last"}};
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (int i = 0; i < per_layer; ++i) {
      const std::string n = p + "experts." + std::to_string(i / 4) + ".w" + std::to_string(i % 4);
      switch (i % 4) {
        case 0:
          tensors[n] = {{"dtype", "BF16"}, {"shape", {4 * h, h}}, {"tp_dim", 0}, {"parts", 2}, {"layer", l}};
          break;
        case 1:
          tensors[n] = {{"dtype", "BF16"}, {"shape", {h, 2 * h}}, {"tp_dim", 1}, {"layer", l}};
          break;
        case 2:
          tensors[n] = {{"dtype", "BF16"}, {"shape", {3 * h, h}}, {"tp_dim", 0}, {"layer", l}};
          break;
        default:
          tensors[n] = {{"dtype", "F32"}, {"shape", {h}}, {"layer", l}};
          break;
      }
    }
  }
  json j = {
      {"parallelism", {{"tp", par.tp}, {"pp", par.pp}, {"dp", par.dp}}}, {"num_layers", layers}, {"tensors", tensors}};
  return j.dump();
}

// Bytes the heap holds in use now.
uint64_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;  // chunks in the arenas, and chunks mapped on their own
}

// The most heap in use while fn() runs, above what was in use before it (sampled every
// millisecond), and fn's seconds.
template <typename F>
std::pair<uint64_t, double> peak_heap_growth(F&& fn) {
  const uint64_t base = heap_in_use();
  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak{base};
  std::thread sampler([&] {
    while (!done) {
      peak = std::max<uint64_t>(peak, heap_in_use());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const double t0 = ptcfs::bench::now_s();
  fn();
  const double s = ptcfs::bench::now_s() - t0;
  done = true;
  sampler.join();
  peak = std::max<uint64_t>(peak, heap_in_use());
  return {peak - base, s};
}

uint64_t plan_bytes(const Plan& p) {
  return p.copies.size() * sizeof(Copy) + p.fills.size() * sizeof(Fill) + p.transfers.size() * sizeof(Transfer);
}

template <typename T>
T must(Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "bench_plan: %s: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

}  // namespace

int main(int argc, char** argv) {
  int tensors = 100000;
  std::string json_out;
  CLI::App app{"ptcfs planning benchmark: 1,024 GPUs, 100,000 tensors"};
  app.add_option("--tensors", tensors, "Number of tensors (about)")->capture_default_str();
  app.add_option("--json", json_out, "Also write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  const int per_layer = 200, layers = std::max(1, (tensors - 2 + per_layer - 1) / per_layer);
  const Parallelism from{8, 16, 8}, to{4, 32, 8};  // 1,024 GPUs before and after
  const Ptc model = must(parse_ptc_json(moe_ptc_json(layers, per_layer, from), "bench ptc.json"), "ptc");
  std::printf("PTC: %zu tensors, %d layers; %s -> %s (1,024 GPUs)\n", model.tensors.size(), layers,
              from.to_string().c_str(), to.to_string().c_str());

  double t0 = ptcfs::bench::now_s();
  const Layout a = must(Layout::make(model, from), "layout from");
  const Layout b = must(Layout::make(model, to), "layout to");
  const double layouts_s = ptcfs::bench::now_s() - t0;

  Plan single;
  const auto [single_heap, single_s] =
      peak_heap_growth([&] { single = must(make_plan(a, b, Holdings::single_node(a, b)), "make_plan"); });

  // 128 nodes of 8 GPUs; the new config is placed on the same nodes.
  ClusterConfig cluster;
  for (int i = 0; i < 128; ++i)
    cluster.nodes.push_back({"n" + std::to_string(i), "10.0.0.1:" + std::to_string(7000 + i), 8});
  ClusterHoldings holdings;
  holdings.src_nodes = must(shard_nodes(a, cluster), "placement from");
  holdings.dst_nodes = must(shard_nodes(b, cluster), "placement to");
  holdings.num_nodes = 128;
  Plan cplan;
  const auto [cluster_heap, cluster_s] =
      peak_heap_growth([&] { cplan = must(make_cluster_plan(a, b, holdings), "make_cluster_plan"); });
  t0 = ptcfs::bench::now_s();
  const uint64_t bmin = min_transfer_bytes(a, b, holdings);
  const double min_s = ptcfs::bench::now_s() - t0;

  auto mib = [](double bytes) { return bytes / 1048576.0; };
  std::printf("layouts            %.3f s\n", layouts_s);
  std::printf("single-node plan   %.3f s  %zu copies, %zu fills: %.1f MiB of plan, peak heap +%.1f MiB\n", single_s,
              single.copies.size(), single.fills.size(), mib(plan_bytes(single)), mib(single_heap));
  std::printf("cluster plan       %.3f s  %zu copies, %zu transfers: %.1f MiB of plan, peak heap +%.1f MiB\n",
              cluster_s, cplan.copies.size(), cplan.transfers.size(), mib(plan_bytes(cplan)), mib(cluster_heap));
  std::printf("bytes_min          %.3f s  %.1f GB to move (plan moves %.1f GB)\n", min_s, bmin / 1e9,
              cplan.bytes_remote / 1e9);
  if (bmin != cplan.bytes_remote) {
    std::fprintf(stderr, "bench_plan: the cluster plan moves %llu bytes, bytes_min is %llu\n",
                 static_cast<unsigned long long>(cplan.bytes_remote), static_cast<unsigned long long>(bmin));
    return 1;
  }
  if (!json_out.empty()) {
    json j = {{"tensors", model.tensors.size()},
              {"gpus", from.world()},
              {"from", from.to_string()},
              {"to", to.to_string()},
              {"single_plan_s", single_s},
              {"single_copies", single.copies.size()},
              {"single_plan_bytes", plan_bytes(single)},
              {"single_peak_heap_bytes", single_heap},
              {"cluster_plan_s", cluster_s},
              {"cluster_copies", cplan.copies.size()},
              {"cluster_transfers", cplan.transfers.size()},
              {"cluster_plan_bytes", plan_bytes(cplan)},
              {"cluster_peak_heap_bytes", cluster_heap},
              {"bytes_min", bmin},
              {"bytes_min_s", min_s},
              {"layouts_s", layouts_s}};
    std::ofstream(json_out) << j.dump(2) << "\n";
  }
  return 0;
}
