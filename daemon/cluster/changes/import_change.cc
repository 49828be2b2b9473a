#include "daemon/cluster/changes/import_change.h"

#include <algorithm>

#include "daemon/cluster/changes/part_context.h"
#include "daemon/reshard/importer.h"
#include "daemon/store/checksum.h"
#include "ptc/base/json_util.h"
#include "daemon/cluster/membership.h"
#include "ptc/cluster.h"

namespace ptcfs {

namespace {

// "{node}" in an import directory is this node's id.
std::string node_dir(std::string dir, const std::string& id) {
  for (size_t at; (at = dir.find("{node}")) != std::string::npos;) dir.replace(at, 6, id);
  return dir;
}

}  // namespace

Result<PreparedChange> prepare_part(const PartContext& ctx, const ImportChange& c, PrepareReply& reply) {
  ctx.members.learn(c.nodes);
  ImportSummary sum;
  ptc::Ptc seen;
  auto place = [&](const ptc::Layout& layout) -> Result<StepPlacement> {
    seen = layout.ptc();
    // Pinned as the coordinator saw them (a node's own view if it sent none).
    const auto cluster = ctx.peers.cluster();
    const std::vector<int> gpus = c.gpus.empty() ? ptc::gpus_of(*cluster, c.nodes) : c.gpus;
    PTC_ASSIGN_OR_RETURN(auto holders, ptc::shard_nodes_on(layout, *cluster, c.nodes, gpus));
    StepPlacement p{c.nodes, gpus, {}, {}};
    for (const auto& h : holders) p.held.push_back(std::find(h.begin(), h.end(), ctx.self) != h.end());
    return p;
  };
  const SourceDirs local;
  PTC_ASSIGN_OR_RETURN(auto src, (ctx.options.sources ? *ctx.options.sources : local).open(node_dir(c.dir, ctx.id)));
  PTC_ASSIGN_OR_RETURN(PreparedChange change, ptcfs::prepare_import(ctx.store, *src, c.job, c.step, place, sum));
  const std::string text = ptc::ptc_to_json(seen);
  reply.shards = sum.shards;
  reply.bytes = sum.bytes;
  reply.ptc_digest = xxh3_of(text.data(), text.size());
  reply.tensors = seen.tensors.size();
  return change;
}

}  // namespace ptcfs
