#include "ptc/base/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <map>
#include <mutex>

namespace ptcfs::metrics {

namespace {

using prometheus::Counter;
using prometheus::Histogram;

constexpr std::array<std::string_view, static_cast<size_t>(ViewKind::kCount)> kViewKinds = {
    "metadata", "rank_file", "slice_npy", "full_npy", "dataset", "pending", "dcp", "hf"};
constexpr std::array<const char*, static_cast<size_t>(FuseOp::kCount)> kFuseOps = {
    "lookup", "getattr", "open", "read", "release", "readdir", "write", "create", "other"};

// Latency buckets from 10 us to 10 s (FUSE requests), and 1 ms to ~17 min (operations).
Histogram::BucketBoundaries fuse_buckets() {
  return {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10};
}
Histogram::BucketBoundaries operation_buckets() {
  return {1e-3, 1e-2, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 1000};
}

prometheus::Family<Counter>& counters(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
prometheus::Family<Histogram>& histograms(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}

// Every metric, made once; the per-label children of the fixed label sets are looked up
// once too, so recording costs no map lookup.
struct Metrics {
  std::shared_ptr<prometheus::Registry> reg = std::make_shared<prometheus::Registry>();
  prometheus::Family<Counter>& reads =
      counters(*reg, "ptcfs_view_reads_total", "Reads served from files of the mount, by view kind");
  prometheus::Family<Counter>& read_bytes =
      counters(*reg, "ptcfs_view_read_bytes_total", "Bytes served from files of the mount, by view kind");
  prometheus::Family<Histogram>& fuse = histograms(*reg, "ptcfs_fuse_request_duration_seconds",
                                                   "Time the daemon took to answer a FUSE request, by operation");
  prometheus::Family<Counter>& ops =
      counters(*reg, "ptcfs_operations_total", "Control operations (import, repartition, save, ...) by outcome");
  prometheus::Family<Histogram>& op_seconds =
      histograms(*reg, "ptcfs_operation_duration_seconds", "Duration of control operations");
  prometheus::Family<Counter>& op_bytes =
      counters(*reg, "ptcfs_operation_bytes_total", "Bytes imported, saved or re-split by control operations");
  Counter& moved =
      counters(*reg, "ptcfs_repartition_moved_bytes_total", "Bytes repartitions moved between nodes").Add({});
  Counter& min = counters(*reg, "ptcfs_repartition_min_bytes_total",
                          "The least bytes those repartitions had to move (what any plan must move)")
                     .Add({});
  prometheus::Family<Counter>& peer_in =
      counters(*reg, "ptcfs_peer_received_bytes_total", "Bytes received from each peer node");
  prometheus::Family<Counter>& peer_err =
      counters(*reg, "ptcfs_peer_errors_total", "Failed calls to each peer node (refused, unreachable, timed out)");
  prometheus::Family<Counter>& peer_out =
      counters(*reg, "ptcfs_peer_sent_bytes_total", "Bytes this node served to each peer node");
  prometheus::Family<Counter>& dcp_file =
      counters(*reg, "ptcfs_dcp_read_bytes_total",
               "Bytes served from each file of the steps' DCP views (tp{t}-pp{p}.distcp: TP rank t's chunks)");

  std::array<Counter*, kViewKinds.size()> reads_by_kind{}, bytes_by_kind{};
  std::array<Histogram*, kFuseOps.size()> fuse_by_op{};

  struct Op {
    Counter *ok, *failed, *bytes;
    Histogram* seconds;
  };
  std::mutex mu;  // guards ops_ and peers_ (label sets that grow)
  std::map<std::string, Op, std::less<>> ops_;
  std::map<std::string, std::pair<Counter*, Counter*>, std::less<>> peers_;
  std::map<std::string, Counter*, std::less<>> sent_;
  std::map<std::string, Counter*, std::less<>> dcp_;

  Metrics() {
    for (size_t i = 0; i < kViewKinds.size(); ++i) {
      const std::string kind(kViewKinds[i]);
      reads_by_kind[i] = &reads.Add({{"kind", kind}});
      bytes_by_kind[i] = &read_bytes.Add({{"kind", kind}});
    }
    for (size_t i = 0; i < kFuseOps.size(); ++i) fuse_by_op[i] = &fuse.Add({{"op", kFuseOps[i]}}, fuse_buckets());
  }

  Op& op(std::string_view name) {
    std::lock_guard lock(mu);
    auto it = ops_.find(name);
    if (it != ops_.end()) return it->second;
    const std::string n(name);
    Op o{&ops.Add({{"op", n}, {"outcome", "ok"}}), &ops.Add({{"op", n}, {"outcome", "error"}}),
         &op_bytes.Add({{"op", n}}), &op_seconds.Add({{"op", n}}, operation_buckets())};
    return ops_.emplace(n, o).first->second;
  }

  std::pair<Counter*, Counter*>& peer(const std::string& id) {
    std::lock_guard lock(mu);
    auto it = peers_.find(id);
    if (it != peers_.end()) return it->second;
    return peers_.emplace(id, std::make_pair(&peer_in.Add({{"peer", id}}), &peer_err.Add({{"peer", id}})))
        .first->second;
  }
  Counter& sent(const std::string& id) {
    std::lock_guard lock(mu);
    auto it = sent_.find(id);
    if (it != sent_.end()) return *it->second;
    return *sent_.emplace(id, &peer_out.Add({{"peer", id}})).first->second;
  }
  Counter& dcp(std::string_view file) {
    std::lock_guard lock(mu);
    auto it = dcp_.find(file);
    if (it != dcp_.end()) return *it->second;
    const std::string f(file);
    return *dcp_.emplace(f, &dcp_file.Add({{"file", f}})).first->second;
  }
};

Metrics& m() {
  static Metrics* metrics = new Metrics;  // never destroyed: threads may record while the process exits
  return *metrics;
}

}  // namespace

std::shared_ptr<prometheus::Registry> registry() { return m().reg; }

std::string_view view_kind_name(ViewKind k) { return kViewKinds[static_cast<size_t>(k)]; }

void view_read(ViewKind kind, uint64_t bytes) {
  const auto i = static_cast<size_t>(kind);
  m().reads_by_kind[i]->Increment();
  m().bytes_by_kind[i]->Increment(static_cast<double>(bytes));
}

FuseTimer::~FuseTimer() {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  m().fuse_by_op[static_cast<size_t>(op_)]->Observe(s);
}

void operation(std::string_view op, bool ok, double seconds, uint64_t bytes) {
  auto& o = m().op(op);
  (ok ? o.ok : o.failed)->Increment();
  o.seconds->Observe(seconds);
  if (bytes) o.bytes->Increment(static_cast<double>(bytes));
}

void repartition_bytes(uint64_t moved, uint64_t min) {
  m().moved.Increment(static_cast<double>(moved));
  m().min.Increment(static_cast<double>(min));
}

void peer_received(const std::string& peer, uint64_t bytes) {
  m().peer(peer).first->Increment(static_cast<double>(bytes));
}
DcpReads::DcpReads(std::string_view file) : counter_(&m().dcp(file)) {}
void DcpReads::add(uint64_t bytes) const { static_cast<Counter*>(counter_)->Increment(static_cast<double>(bytes)); }
void peer_error(const std::string& peer) { m().peer(peer).second->Increment(); }
void peer_sent(const std::string& peer, uint64_t bytes) {
  m().sent(peer.empty() ? "unknown" : peer).Increment(static_cast<double>(bytes));
}

}  // namespace ptcfs::metrics
