#include "daemon/node_gauges.h"

#include <filesystem>
#include <set>
#include <system_error>

#include "daemon/cluster/membership.h"
#include "daemon/cluster/participant.h"
#include "daemon/direct/direct_server.h"
#include "daemon/save/save_service.h"
#include "daemon/store/store.h"

namespace ptcfs {

std::vector<GaugeSample> node_gauges(const NodeGaugeSources& src) {
  std::vector<GaugeSample> out;
  auto add = [&](const char* name, const char* help, double v) { out.push_back({name, help, {}, v}); };
  out.push_back({"ptcfs_info",
                 "The daemon's version and node id (always 1)",
                 {{"version", PTCFS_VERSION}, {"node", src.node}},
                 1});

  const auto snap = src.store->snapshot();
  std::set<std::string> jobs;
  double bytes = 0;
  for (const auto& [key, v] : snap->steps) {
    jobs.insert(key.first);
    bytes += static_cast<double>(v->total_bytes());
  }
  add("ptcfs_jobs", "Jobs with committed steps", static_cast<double>(jobs.size()));
  add("ptcfs_steps", "Committed checkpoint steps", static_cast<double>(snap->steps.size()));
  add("ptcfs_datasets", "Datasets", static_cast<double>(snap->datasets.size()));
  add("ptcfs_stored_bytes", "Logical bytes of the committed steps' tensors", bytes);

  // Blob files on disk (committed, pending and those replaced versions still hold).
  double files = 0, disk = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(std::filesystem::path(src.store->data_dir()) / "blobs", ec), end;
       !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    const auto size = it->file_size(sec);
    if (sec) continue;  // removed meanwhile
    ++files;
    disk += static_cast<double>(size);
  }
  add("ptcfs_blob_files", "Blob files in the data directory", files);
  add("ptcfs_blob_bytes", "Bytes of the blob files in the data directory", disk);

  if (src.saves)
    add("ptcfs_pending_saves", "Steps being saved into the mount, not committed yet",
        static_cast<double>(src.saves->pending().size()));
  if (src.parts)
    add("ptcfs_prepared_changes", "Cluster changes prepared on this node and not decided yet",
        static_cast<double>(src.parts->prepared_count()));
  if (src.direct) {
    add("ptcfs_direct_connections", "Clients connected to the direct socket",
        static_cast<double>(src.direct->connections()));
    add("ptcfs_direct_files_held", "Files open through the direct socket (their versions are held)",
        static_cast<double>(src.direct->files_held()));
  }
  if (src.membership) {
    add("ptcfs_cluster_nodes", "Live member nodes of the cluster",
        static_cast<double>(src.membership->members().size()));
    const auto d = src.membership->describe();
    if (d.value("mode", std::string()) == "etcd")
      add("ptcfs_etcd_fenced", "1 while this node has lost etcd and takes part in no change (self-fenced)",
          d.value("fenced", false) ? 1 : 0);
  }
  return out;
}

}  // namespace ptcfs
