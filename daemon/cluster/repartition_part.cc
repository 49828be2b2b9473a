#include "daemon/cluster/repartition_part.h"

#include <ctime>
#include <optional>

#include "daemon/cluster/nodes.h"
#include "daemon/reshard/extent_map.h"
#include "daemon/store/checksum.h"
#include "daemon/store/parallel.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"

namespace ptcfs {

using nlohmann::json;

Result<ptc::ClusterConfig> change_table(const RepartitionChange& c, const ptc::ClusterConfig& known) {
  std::vector<std::string> ids = c.from_nodes;
  ids.insert(ids.end(), c.to_nodes.begin(), c.to_nodes.end());
  for (const auto& h : c.from_holders) ids.insert(ids.end(), h.begin(), h.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  ptc::ClusterConfig table;
  for (const auto& id : ids) {
    const int n = known.find(id);
    if (n < 0) return not_found("node " + id + " of the change of " + c.job + "/" + c.step + " is unknown here");
    table.nodes.push_back(known.nodes[static_cast<size_t>(n)]);
  }
  return table;
}

Result<ptc::ClusterHoldings> cluster_holdings(const ptc::Layout& from, const ptc::Layout& to,
                                              const RepartitionChange& c, const ptc::ClusterConfig& cluster) {
  ptc::ClusterHoldings h;
  h.num_nodes = static_cast<int>(cluster.nodes.size());
  if (!c.from_holders.empty()) {  // a saved step: held where it was written
    if (c.from_holders.size() != from.shards().size()) return invalid("the holders do not match the layout");
    h.src_nodes = node_indices(cluster, c.from_holders);
  } else {
    PTC_ASSIGN_OR_RETURN(h.src_nodes, ptc::shard_nodes_on(from, cluster, c.from_nodes, c.from_gpus));
  }
  PTC_ASSIGN_OR_RETURN(h.dst_nodes, ptc::shard_nodes_on(to, cluster, c.to_nodes, c.to_gpus));
  for (const auto& id : c.down) {
    const int n = cluster.find(id);
    for (auto& nodes : h.src_nodes) std::erase(nodes, n);
  }
  return h;
}

uint64_t plan_digest(const ptc::Plan& p) {
  Xxh3Stream st;
  for (const auto& c : p.copies) {
    const int64_t v[] = {c.tensor, c.src_shard, c.src_slice, c.dst_shard, c.dst_slice, c.src_node,
                         c.src_lo, c.dst_lo,    c.len,       c.dst_node,  c.transfer};
    st.update(v, sizeof v);
  }
  for (const auto& f : p.fills) {
    const int64_t v[] = {f.tensor, f.dst_shard, f.dst_slice, f.dst_lo, f.len, f.dst_node};
    st.update(v, sizeof v);
  }
  for (const auto& t : p.transfers) {
    const int64_t v[] = {t.tensor, t.src_node, t.dst_node, t.src_shard, t.src_slice, t.src_lo, t.glo, t.len};
    st.update(v, sizeof v);
  }
  return st.digest();
}

namespace {

// A piece of work: bytes [off, off + n) of transfer t's slab.
struct Chunk {
  size_t transfer;
  uint64_t off, n;
};

// Pulls every transfer into `w` (transfer i at offsets[i]); all or nothing. Each chunk comes
// in pieces of RpcClient::kIntoPiece into a small buffer of the thread's, which stays in the
// CPU's cache: each piece is hashed and written to the blob while hot, and the chunk's hash
// is then checked against the sender's XXH3 (docs/BENCHMARKS.md "What each section does", cluster: measured against
// a whole-chunk buffer and against receiving into a mapping of the blob).
// `backend[n]`: the peer backend's index of node n of the plan; `self_id` names this node to
// the peers it reads from (their sent-bytes metrics).
// The chunks are taken in turn from a point that depends on this node (`self` of `nodes`), so that
// replicas pulling the same windows from one sender ask for each at different times and the
// later ones find its XXH3 computed (SlabDigests).
Status fetch_transfers(transport::PeerBackend& peers, const std::string& self_id, const RepartitionChange& c,
                       const ptc::Layout& from, const ptc::Plan& part, const std::vector<int>& backend,
                       const std::vector<uint64_t>& offsets, const BlobWriter& w, const PrepareOptions& opt,
                       size_t self, size_t nodes) {
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < part.transfers.size(); ++i)
    for (uint64_t off = 0; off < part.transfers[i].bytes; off += opt.chunk)
      chunks.push_back({i, off, std::min(opt.chunk, part.transfers[i].bytes - off)});
  return parallel_for(chunks.size(), opt.fetchers, [&]() -> Worker {
    auto buf = std::make_shared<std::vector<std::byte>>(transport::RpcClient::kIntoPiece);
    return [&, buf](size_t k) -> Status {
      const Chunk& ch = chunks[(k + chunks.size() * self / std::max<size_t>(nodes, 1)) % chunks.size()];
      const ptc::Transfer& t = part.transfers[ch.transfer];
      const ptc::ShardId src = from.shards()[t.src_shard];
      const std::string& tensor = from.ptc().tensors[t.tensor].name;
      const std::string context = "pulling '" + tensor + "' of shard " + src.name();
      const json req =
          to_json(ReadRequest{self_id, c.job, c.step, src.name(), tensor, c.from_version,
                              static_cast<uint64_t>(t.src_lo), static_cast<uint64_t>(t.len), ch.off, ch.n, false});
      const int peer = backend[static_cast<size_t>(t.src_node)];
      const uint64_t at = offsets[ch.transfer] + ch.off;
      std::optional<Xxh3Stream> hash;
      transport::IntoHooks hooks;
      hooks.place = [&](uint64_t off, size_t) -> Result<std::byte*> {
        if (off == 0) hash.emplace();  // a retried call starts again
        return buf->data();
      };
      hooks.landed = [&](uint64_t off, const std::byte* p, size_t n) {
        hash->update(p, n);
        return w.write_at(at + off, p, n);
      };
      PTC_ASSIGN_OR_RETURN(json r, peers.call_into(peer, req, ch.n, hooks), context);
      if (!hash || member_u64_or(r, "xxh3", 0).value_or(0) != hash->digest())
        return corrupt("bytes of '" + tensor + "' from node " + peers.cluster()->nodes[static_cast<size_t>(peer)].id +
                       " fail their checksum")
            .with_context(context);
      w.start_writeback(at, ch.n);
      return Status::ok();
    };
  });
}

}  // namespace

namespace {

// What every node computes alike for a change: the node table, the layouts, the holdings, and
// the plan (checked against the coordinator's digest), with this node's part of it.
struct PartPlan {
  ptc::ClusterConfig cluster;  // the change's table (change_table)
  std::vector<int> backend;    // per node of the table, its index in the peer backend
  std::string self_id;
  int self = -1;  // this node in the table; -1: a node the change names nowhere (it only records the step)
  std::shared_ptr<const StepVersion> old;  // null: this node has never held the step
  ptc::Layout from, to;
  ptc::ClusterHoldings holdings;
  ptc::Plan part;  // ptc::node_part of the plan for `self`
};

Result<PartPlan> plan_part(const Store& store, const transport::PeerBackend& peers, int self_in_backend,
                           const RepartitionChange& c) {
  const std::string name = c.job + "/" + c.step;
  const auto known = peers.cluster();
  PartPlan p;
  PTC_ASSIGN_OR_RETURN(p.cluster, change_table(c, *known));
  for (const auto& n : p.cluster.nodes) p.backend.push_back(known->find(n.id));
  p.self_id = known->nodes[static_cast<size_t>(self_in_backend)].id;
  p.self = p.cluster.find(p.self_id);
  {
    const auto snap = store.snapshot();
    if (auto it = snap->steps.find({c.job, c.step}); it != snap->steps.end()) p.old = it->second;
  }
  if (p.old && p.old->version() != c.from_version)
    return error(Code::kFailedPrecondition, name + " is at version " + std::to_string(p.old->version()) + " on node " +
                                                p.self_id + ", not " + std::to_string(c.from_version));
  PTC_ASSIGN_OR_RETURN(p.from, ptc::Layout::make(c.ptc, c.ptc.parallelism));
  PTC_ASSIGN_OR_RETURN(p.to, ptc::Layout::make(c.ptc, c.to));
  PTC_ASSIGN_OR_RETURN(p.holdings, cluster_holdings(p.from, p.to, c, p.cluster));
  if (!p.old)
    for (auto& nodes : p.holdings.src_nodes)
      if (std::find(nodes.begin(), nodes.end(), p.self) != nodes.end())
        return error(Code::kFailedPrecondition,
                     name + " is placed on node " + p.self_id + " but that node does not hold it");
  PTC_ASSIGN_OR_RETURN(ptc::Plan plan, ptc::make_cluster_plan(p.from, p.to, p.holdings));
  if (c.digest != 0 && plan_digest(plan) != c.digest)
    return internal("node " + p.self_id + " computed a different plan for " + name);
  p.part = ptc::node_part(plan, p.self);
  return p;
}

// Pulls this node's transfers, one after another, into one new blob of `change` (none when
// nothing comes): per transfer, the stored slice its slab became.
Result<std::vector<StoredSlice>> receive(Store& store, transport::PeerBackend& peers, const RepartitionChange& c,
                                         const PartPlan& p, const PrepareOptions& opt, PreparedChange& change) {
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (const auto& t : p.part.transfers) {
    offsets.push_back(total);
    total += t.bytes;
  }
  std::vector<StoredSlice> received(p.part.transfers.size());
  change.bytes_received = total;
  if (total == 0) return received;
  PTC_ASSIGN_OR_RETURN(BlobWriter w, store.blobs().create());
  PTC_RETURN_IF_ERROR(fetch_transfers(peers, p.self_id, c, p.from, p.part, p.backend, offsets, w, opt,
                                      static_cast<size_t>(std::max(p.self, 0)), p.cluster.nodes.size()));
  PTC_RETURN_IF_ERROR(w.finish());
  change.blobs.push_back(w.id());
  for (size_t i = 0; i < p.part.transfers.size(); ++i) {
    const ptc::Transfer& t = p.part.transfers[i];
    const auto& ss = p.from.slices(p.from.shards()[t.src_shard])[t.src_slice];
    const ptc::SlabGeometry g = ptc::slab_geometry(p.from.tensor(ss), ss.local_shape);
    const uint64_t row = static_cast<uint64_t>(t.len) * g.inner;
    received[i].rows = g.rows;
    received[i].extents = {Extent{w.id(), offsets[i], row, g.rows > 1 ? row : 0}};
  }
  return received;
}

// The new version's shards: extents of the old blobs and of the received slabs (shards this
// node does not hold left empty), compacted where too fragmented (new blobs go to `change`).
Result<std::vector<std::vector<StoredSlice>>> build_shards(Store& store, const PartPlan& p,
                                                           const std::vector<StoredSlice>& received,
                                                           const std::vector<bool>& held, const PrepareOptions& opt,
                                                           PreparedChange& change, uint64_t& compacted) {
  auto stored = map_extents(p.from, p.to, p.part, [&](const ptc::Copy& cp) {
    if (cp.transfer >= 0)
      return CopySource{&received[static_cast<size_t>(cp.transfer)],
                        p.part.transfers[static_cast<size_t>(cp.transfer)].src_lo};
    return CopySource{&p.old->stored(p.from.shards()[cp.src_shard], cp.src_slice), 0};
  });
  for (size_t s = 0; s < stored.size(); ++s)
    if (!held[s]) stored[s].clear();
  PTC_ASSIGN_OR_RETURN(Selection sel,
                       select_compaction(stored, opt.policy, [&](uint64_t id) { return store.blobs().size_of(id); }));
  PTC_ASSIGN_OR_RETURN(CompactionResult comp, compact(store.blobs(), stored, sel, opt.policy, {}));
  for (const auto& b : comp.blobs) change.blobs.push_back(b.id());
  compacted = comp.bytes;
  return stored;
}

}  // namespace

Result<PreparedChange> prepare_repartition_part(Store& store, transport::PeerBackend& peers, int self_in_backend,
                                                const RepartitionChange& c, const PrepareOptions& opt) {
  PTC_ASSIGN_OR_RETURN(PartPlan p, plan_part(store, peers, self_in_backend, c));
  // On error the change aborts itself: its blobs go and the claim is released.
  PreparedChange change(store);
  PTC_RETURN_IF_ERROR(change.claim(store, p.old ? Claim::kChangeStep : Claim::kNewStep, c.job, c.step));
  change.replaced = p.old;
  PTC_ASSIGN_OR_RETURN(const std::vector<StoredSlice> received, receive(store, peers, c, p, opt, change));

  StepPlacement placement;
  placement.nodes = c.to_nodes;
  placement.gpus = c.to_gpus.empty() ? ptc::gpus_of(p.cluster, c.to_nodes) : c.to_gpus;
  placement.held.assign(p.to.shards().size(), false);
  for (size_t s = 0; s < p.to.shards().size(); ++s) {
    const auto& dst = p.holdings.dst_nodes[s];
    placement.held[s] = std::find(dst.begin(), dst.end(), p.self) != dst.end();
  }
  uint64_t compacted = 0;
  PTC_ASSIGN_OR_RETURN(auto stored, build_shards(store, p, received, placement.held, opt, change, compacted));
  change.next =
      store.new_version(c.job, c.step, c.from_version + 1, std::move(p.to), std::move(stored), std::move(placement));
  log::info("prepared {}/{} version {} on node {}: {} transfers, {} bytes received, {} compacted", c.job, c.step,
            c.from_version + 1, p.self_id, p.part.transfers.size(), change.bytes_received, compacted);
  return change;
}

}  // namespace ptcfs
