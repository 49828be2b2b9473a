// Benchmark: single-node repartition and reads through the mount, each against a baseline
// measured in the same process (docs/BENCHMARKS.md "Budgets"):
//   - repartition time vs a parallel memcpy of the bytes it re-lays out (same threads);
//   - reading the new shard files through the mount (1 MiB reads), first read and
//     re-read, vs reading the same bytes from tmpfs.
// Three scenarios: a Megatron-style model tp=4,pp=2 -> tp=2,pp=4 (column-parallel tensors are
// re-cut into ranges, row-parallel ones, split along dimension 1, into strided 1 KiB row
// pieces); a model whose tensors are all split along their last dimension, tp=4 -> tp=2
// (every slice strided); and the Megatron-style model tp=4,pp=2 -> tp=4,pp=4 (layers move:
// a pure remap).
//
// Usage: ptcfs_bench_repartition [--gib 1.0] [--threads N] [--dir DIR] [--json FILE] [--min-avg-extent B]
//                                [--min-piece B] [--scenarios megatron,pp-only,last-dim]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "bench/bench_util.h"
#include "daemon/control/results.h"
#include "daemon/reshard/importer.h"
#include "daemon/reshard/repartition.h"
#include "daemon/store/store.h"
#include "fs/filesystem.h"
#include "ptc/base/log.h"
#include "ptc/formats/safetensors.h"

namespace {

using namespace ptcfs;
using nlohmann::json;
namespace stdfs = std::filesystem;

// A GPT-style PTC of `layers` layers and hidden size h, BF16. last_dim: every matrix is
// split along its last dimension instead.
std::string make_ptc_json(int layers, int64_t h, int tp, int pp, bool last_dim) {
  json tensors = json::object();
  auto mat = [&](const std::string& n, int64_t r, int64_t c, int tp_dim, int layer, int parts = 1) {
    json t = {{"dtype", "BF16"}, {"shape", {r, c}}, {"tp_dim", last_dim ? 1 : tp_dim}, {"layer", layer}};
    if (parts > 1 && !last_dim) t["parts"] = parts;
    tensors[n] = t;
  };
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    mat(p + "self_attention.query_key_value.weight", 3 * h, h, 0, l);
    mat(p + "self_attention.dense.weight", h, h, 1, l);
    mat(p + "mlp.dense_h_to_4h.weight", 8 * h, h, 0, l, 2);
    mat(p + "mlp.dense_4h_to_h.weight", h, 4 * h, 1, l);
    tensors[p + "input_layernorm.weight"] = {{"dtype", "F32"}, {"shape", {h}}, {"layer", l}};
  }
  json j = {{"parallelism", {{"tp", tp}, {"pp", pp}, {"dp", 1}}}, {"num_layers", layers}, {"tensors", tensors}};
  return j.dump(2);
}

// Writes the rank files of `layout` with pseudo-random contents.
uint64_t write_checkpoint(const std::string& dir, const std::string& ptc_text, const ptc::Layout& layout) {
  stdfs::create_directories(dir);
  std::ofstream(dir + "/ptc.json") << ptc_text;
  uint64_t total = 0;
  std::mt19937_64 rng(42);
  std::vector<uint64_t> buf(1 << 20);
  for (const auto& shard : layout.shards()) {
    std::vector<formats::TensorDecl> decls;
    for (const auto& sl : layout.slices(shard))
      decls.push_back({layout.tensor(sl).name, layout.tensor(sl).dtype, sl.local_shape});
    auto l = formats::layout_safetensors(decls);
    if (!l) throw std::runtime_error(l.status().to_string());
    FILE* f = std::fopen((dir + "/" + shard.name() + ".safetensors").c_str(), "wb");
    std::fwrite(l->header.data(), 1, l->header.size(), f);
    uint64_t left = l->file_size() - l->header.size();
    total += left;
    while (left > 0) {
      for (auto& x : buf) x = rng();
      const uint64_t n = std::min<uint64_t>(left, buf.size() * 8);
      std::fwrite(buf.data(), 1, n, f);
      left -= n;
    }
    std::fclose(f);
  }
  return total;
}

uint64_t g_min_avg_extent = CompactionPolicy{}.min_avg_extent;
uint64_t g_min_piece = CompactionPolicy{}.min_piece;

struct Row {
  std::string what, ours, base;
  double ratio;
  std::string target;
};

void print_rows(const std::vector<Row>& rows) {
  std::printf("\n%-58s %16s %16s %8s  %s\n", "measure", "ptcfs", "baseline", "ratio", "target");
  for (const auto& r : rows)
    std::printf("%-58s %16s %16s %8.2f  %s\n", r.what.c_str(), r.ours.c_str(), r.base.c_str(), r.ratio,
                r.target.c_str());
}

std::string secs(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f s", s);
  return b;
}

json run_scenario(const std::string& name, const std::string& root, int layers, int64_t h, ptc::Parallelism from,
                  ptc::Parallelism to, bool last_dim, unsigned threads, std::vector<Row>& rows) {
  std::printf("== %s: %s -> %s\n", name.c_str(), from.to_string().c_str(), to.to_string().c_str());
  const std::string dir = root + "/" + name;
  stdfs::remove_all(dir);
  const std::string text = make_ptc_json(layers, h, from.tp, from.pp, last_dim);
  auto ptc = ptc::parse_ptc_json(text, "bench ptc.json");
  auto layout = ptc::Layout::make(*ptc, from);
  if (!layout) throw std::runtime_error(layout.status().to_string());
  double t0 = bench::now_s();
  const uint64_t bytes = write_checkpoint(dir + "/ckpt", text, *layout);
  std::printf("   generated %.2f GiB in %.1f s\n", static_cast<double>(bytes) / (1 << 30), bench::now_s() - t0);

  std::function<void()> refresh;  // the mount's, once it is mounted
  auto store = Store::open(dir + "/data", nullptr, nullptr, [&] {
    if (refresh) refresh();
  });
  if (!store) throw std::runtime_error(store.status().to_string());
  t0 = bench::now_s();
  auto imp = import_checkpoint(**store, dir + "/ckpt", "bench", "1");
  if (!imp) throw std::runtime_error(imp.status().to_string());
  std::printf("   imported in %.2f s\n", bench::now_s() - t0);
  stdfs::remove_all(dir + "/ckpt");

  fs::MountOptions mo;
  mo.mountpoint = dir + "/mnt";
  Store& st = **store;
  auto fsys = fs::Filesystem::mount(mo, [&st] { return mount_contents(st); });
  if (!fsys) throw std::runtime_error(fsys.status().to_string());
  refresh = [&] { (void)(*fsys)->refresh(); };
  std::thread loop([&] { (void)(*fsys)->run(); });
  const std::string shm = "/dev/shm/ptcfs-bench-" + name;
  // Whatever happens below: stop and unmount, and remove the tmpfs copies.
  struct Teardown {
    std::function<void()> fn;
    ~Teardown() { fn(); }
  } teardown{[&] {
    (*fsys)->stop();
    loop.join();
    fsys->reset();
    stdfs::remove_all(shm);
  }};

  CompactionPolicy policy;
  policy.min_avg_extent = g_min_avg_extent;
  policy.min_piece = g_min_piece;
  policy.threads = threads;
  RepartitionRequest req{"bench", "1", to, false, {}};
  auto res = repartition(st, req, policy);
  if (!res) throw std::runtime_error(res.status().to_string());
  const uint64_t moved = res->bytes_total;
  std::printf("   repartition: %.4f s, %zu copies, %zu extents, %.1f MiB compacted (%zu slices)\n", res->seconds,
              res->copies, res->extents, static_cast<double>(res->bytes_compacted) / (1 << 20), res->compacted_slices);

  // memcpy of the same bytes, same threads; buffers touched first so page faults don't count.
  std::vector<char> a(moved, 1), b(moved, 0);
  double mc = 1e9;
  for (int i = 0; i < 3; ++i) mc = std::min(mc, bench::parallel_memcpy(b.data(), a.data(), moved, threads));
  rows.push_back({name + ": repartition vs memcpy (" + std::to_string(threads) + " threads)", secs(res->seconds),
                  secs(mc), mc / res->seconds, "> 1 (faster than memcpy)"});

  // Reads through the mount vs tmpfs.
  std::vector<std::string> files;
  for (const auto& s : st.snapshot()->steps.begin()->second->layout().shards())
    files.push_back(mo.mountpoint + "/bench/1/" + s.name() + ".safetensors");
  auto read_all = [&](const std::vector<std::string>& fl, uint64_t* n) {
    double s = 0;
    for (const auto& f : fl) s += bench::read_file(f, 1 << 20, n);
    return s;
  };
  ::sync();  // let writeback of the import and of compaction finish before timing reads
  stdfs::create_directories(shm);
  std::vector<std::string> shm_files;
  for (const auto& f : files) {
    const std::string dst = shm + "/" + stdfs::path(f).filename().string();
    stdfs::copy_file(f, dst, stdfs::copy_options::overwrite_existing);
    shm_files.push_back(dst);
  }
  // Best of three each. A first read drops the mount files' cached pages before it; a
  // re-read follows an untimed one, because the second read of fresh pages also pays for
  // moving them to the kernel's active list (tmpfs pages are long past that).
  uint64_t n1 = 0, n2 = 0, n3 = 0;
  double first = 1e9, again = 1e9, tmpfs = 1e9;
  for (int i = 0; i < 3; ++i) {
    for (const auto& f : files) bench::drop_page_cache(f);
    n1 = 0;
    first = std::min(first, read_all(files, &n1));
  }
  (void)read_all(files, &n2);
  for (int i = 0; i < 3; ++i) {
    n2 = 0;
    again = std::min(again, read_all(files, &n2));
    n3 = 0;
    tmpfs = std::min(tmpfs, read_all(shm_files, &n3));
  }
  rows.push_back({name + ": new views, first read (1 MiB) vs tmpfs", bench::gib_per_s(n1, first),
                  bench::gib_per_s(n3, tmpfs), tmpfs / first, ">= 0.6"});
  rows.push_back({name + ": new views, re-read (1 MiB) vs tmpfs", bench::gib_per_s(n2, again),
                  bench::gib_per_s(n3, tmpfs), tmpfs / again, ">= 0.9"});

  json out = {{"scenario", name},
              {"bytes", moved},
              {"repartition_s", res->seconds},
              {"memcpy_s", mc},
              {"threads", threads},
              {"read_first_gib_s", static_cast<double>(n1) / (1 << 30) / first},
              {"read_again_gib_s", static_cast<double>(n2) / (1 << 30) / again},
              {"tmpfs_gib_s", static_cast<double>(n3) / (1 << 30) / tmpfs},
              {"result", to_json(*res)}};
  teardown.fn();
  teardown.fn = [] {};
  store->reset();
  stdfs::remove_all(dir);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1.0;
  unsigned threads = std::thread::hardware_concurrency();
  std::string dir = "/var/tmp/ptcfs-bench", json_out;
  std::vector<std::string> scenarios = {"megatron", "pp-only", "last-dim"};
  CLI::App app{"ptcfs single-node repartition benchmark"};
  app.add_option("--gib", gib, "Checkpoint size in GiB")->capture_default_str();
  app.add_option("--threads", threads, "Threads for compaction and the memcpy baseline")->capture_default_str();
  app.add_option("--dir", dir, "Scratch directory on the disk under test")->capture_default_str();
  app.add_option("--scenarios", scenarios, "Scenarios to run: megatron, pp-only, last-dim")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--json", json_out, "Also write the results as JSON to this file");
  app.add_option("--min-avg-extent", g_min_avg_extent, "Compaction threshold for flat slices (bytes)")
      ->capture_default_str();
  app.add_option("--min-piece", g_min_piece, "Compaction threshold for strided slices (bytes per piece)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  log::set_level(log::Level::kWarn);

  // 8 layers of 32 h^2 bytes (BF16): pick h so the model is about `gib`.
  const int layers = 8;
  int64_t h = 256;
  while (static_cast<double>(32 * (h + 256) * (h + 256) * layers) <= gib * (1 << 30)) h += 256;
  std::vector<Row> rows;
  json out = json::array();
  try {
    for (const auto& sc : scenarios) {
      if (sc == "megatron")
        out.push_back(run_scenario(sc, dir, layers, h, {4, 2, 1}, {2, 4, 1}, false, threads, rows));
      else if (sc == "pp-only")
        out.push_back(run_scenario(sc, dir, layers, h, {4, 2, 1}, {4, 4, 1}, false, threads, rows));
      else if (sc == "last-dim")
        out.push_back(run_scenario(sc, dir, layers, h, {4, 2, 1}, {2, 2, 1}, true, threads, rows));
      else
        throw std::runtime_error("unknown scenario '" + sc + "' (megatron, pp-only, last-dim)");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
  print_rows(rows);
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  return 0;
}
