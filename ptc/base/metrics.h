// The one metrics facade of ptcfs, beside the logging facade: counters and histograms that
// the filesystem, the transport and the daemon record into, kept in one process-wide
// prometheus-cpp registry that ptcfsd serves at /metrics (--metrics ADDR). Recording is a
// few atomic adds; nothing here does I/O. docs/OPERATIONS.md lists every metric.
// Thread-safety: every function may be called from any thread at any time, also during a
// scrape. Recording never fails.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace prometheus {
class Registry;
}

namespace ptcfs::metrics {

// The registry every metric lives in (created on first use, never destroyed).
std::shared_ptr<prometheus::Registry> registry();

// What a file of the mount is; label `kind` of the read metrics.
enum class ViewKind { kMetadata, kRankFile, kSliceNpy, kFullNpy, kDataset, kPending, kDcp, kHf, kCount };
std::string_view view_kind_name(ViewKind k);

// One read of `bytes` from a view of `kind` (ptcfs_view_reads_total, ptcfs_view_read_bytes_total).
void view_read(ViewKind kind, uint64_t bytes);

// The reads of file `file` of the steps' DCP views (ptcfs_dcp_read_bytes_total{file}), its counter
// looked up once (a view counts every read of its file without a lock): after ptcfs.dcp.prepare,
// tp{t}-pp{p}.distcp holds the chunks of the ranks whose boxes are shard (t, p)'s slices, so its
// count is what those ranks read (docs/FORMATS.md "Layouts from chunks").
class DcpReads {
 public:
  explicit DcpReads(std::string_view file);
  void add(uint64_t bytes) const;

 private:
  void* counter_;  // the file's prometheus::Counter (it lives as long as the registry: always)
};

// The FUSE requests timed (label `op` of ptcfs_fuse_request_duration_seconds).
enum class FuseOp { kLookup, kGetattr, kOpen, kRead, kRelease, kReaddir, kWrite, kCreate, kOther, kCount };

// Times one FUSE request from construction to destruction.
class FuseTimer {
 public:
  explicit FuseTimer(FuseOp op) : op_(op), start_(std::chrono::steady_clock::now()) {}
  ~FuseTimer();
  FuseTimer(const FuseTimer&) = delete;
  FuseTimer& operator=(const FuseTimer&) = delete;

 private:
  FuseOp op_;
  std::chrono::steady_clock::time_point start_;
};

// One control operation (import, repartition, save commit, dataset add, ...) that ended
// with `ok`, took `seconds` and wrote or moved `bytes` (ptcfs_operations_total{op,outcome},
// ptcfs_operation_duration_seconds{op}, ptcfs_operation_bytes_total{op}).
void operation(std::string_view op, bool ok, double seconds, uint64_t bytes);

// A repartition's bytes moved between nodes and the minimum any plan must move
// (ptcfs_repartition_moved_bytes_total, ptcfs_repartition_min_bytes_total).
void repartition_bytes(uint64_t moved, uint64_t min);

// Peer traffic: bytes received from node `peer` for a read, a failed call to it, bytes this
// node served to peers (the serving side does not know which node asked).
void peer_received(const std::string& peer, uint64_t bytes);
void peer_error(const std::string& peer);
// `peer`: the node id the request said it came from ("unknown" when it said none).
void peer_sent(const std::string& peer, uint64_t bytes);

}  // namespace ptcfs::metrics
