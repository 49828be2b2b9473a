#include "daemon/cluster/peer_reader.h"

#include <algorithm>
#include <optional>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/nodes.h"
#include "daemon/store/checksum.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "ptc/plan.h"

namespace ptcfs {

using nlohmann::json;

namespace {
constexpr size_t kPiecesPerRequest = 4096;  // peer.samples' limit
constexpr size_t kMaxCachedVersions = 256;
// How long after a read of a node timed out another read of it fails at once (the kernel's
// retry comes within a millisecond; a reader's next read, later, tries the node again: a new
// process reading the file starts 15 ms or more after).
constexpr auto kRetryAfterTimeout = std::chrono::milliseconds(10);
}  // namespace

Result<std::shared_ptr<const PeerReader::Holders>> PeerReader::holders(const StepVersion& v) const {
  const uint64_t key = v.serial();  // not the version number: a step saved again under its name reuses it
  {
    std::lock_guard lock(mu_);
    if (auto it = holders_.find(key); it != holders_.end()) return it->second;
  }
  Holders h;
  bool all_known = true;
  if (!v.placement().holders.empty()) {  // held where it was written (a step saved into the mounts)
    const auto table = peers_.cluster();
    h = node_indices(*table, v.placement().holders);
    for (const auto& ids : v.placement().holders)
      for (const auto& id : ids) all_known = all_known && table->find(id) >= 0;
  } else {
    // A node of the placement this node does not know (as above) stands at the end of a copy of
    // the table, to place the ranks; its shards are read from the others that hold them.
    const auto table = peers_.cluster();
    std::optional<ptc::ClusterConfig> with;
    for (const auto& id : v.placement().nodes) {
      if (table->find(id) >= 0 || (with && with->find(id) >= 0)) continue;
      if (v.placement().gpus.empty())  // its GPUs place ranks, and only its registration says them
        return error(Code::kUnavailable,
                     v.job() + "/" + v.step() + " is placed on node " + id + ", not in the cluster now");
      if (!with) with = *table;
      with->nodes.push_back({id, "", 1});
      all_known = false;
    }
    PTC_ASSIGN_OR_RETURN(
        h, ptc::shard_nodes_on(v.layout(), with ? *with : *table, v.placement().nodes, v.placement().gpus));
    const int known = static_cast<int>(table->nodes.size());
    if (with)
      for (auto& nodes : h)
        nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [&](int n) { return n >= known; }), nodes.end());
  }
  auto shared = std::make_shared<const Holders>(std::move(h));
  // A holder this node does not know (it started while that node was out of etcd) is added to
  // the node table when it registers again: until then the answer is not kept, or the shard
  // would read as held by no node for the rest of the version's life.
  if (!all_known) return shared;
  std::lock_guard lock(mu_);
  // Versions come and go with repartitions; a bound keeps the cache small (an evicted
  // version still read is recomputed).
  if (holders_.size() >= kMaxCachedVersions) holders_.clear();
  holders_.emplace(key, shared);
  return shared;
}

Status PeerReader::read(const StepVersion& v, const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len,
                        fs::ReadBuffer& out) const {
  PTC_ASSIGN_OR_RETURN(auto holders, this->holders(v));
  const auto& nodes = (*holders)[v.shard_index(shard)];
  if (nodes.empty()) {
    const auto& ids = v.placement().holders;
    const size_t at = v.shard_index(shard);
    if (at < ids.size() && !ids[at].empty()) {
      std::string who;
      for (const auto& id : ids[at]) who += (who.empty() ? "" : ", ") + id;
      return error(Code::kUnavailable,
                   "shard " + shard.name() + " is held by node " + who + ", not in the cluster now");
    }
    return error(Code::kUnavailable, "shard " + shard.name() + " is held by no node in the cluster now");
  }
  const ptc::Slice& sl = v.layout().slices(shard)[slice];
  const ptc::TensorSpec& spec = v.layout().tensor(sl);
  const ptc::SlabGeometry g = ptc::slab_geometry(spec, sl.local_shape);
  const json req = to_json(ReadRequest{self_id_, v.job(), v.step(), shard.name(), spec.name, v.version(), 0,
                                       static_cast<uint64_t>(g.extent), off, len, true});
  auto buf = std::make_shared<std::string>();
  Status last;
  // Spread readers over the replicas; go on to the next when one fails.
  const size_t start = reads_.fetch_add(1) % nodes.size();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int node = nodes[(start + i) % nodes.size()];
    {
      std::lock_guard lock(mu_);
      if (auto it = silent_.find(node); it != silent_.end()) {
        if (std::chrono::steady_clock::now() - it->second.at < kRetryAfterTimeout) {
          last = it->second.why;
          continue;
        }
        silent_.erase(it);
      }
    }
    auto r = peers_.call_data(node, req, *buf, len);
    if (!r && r.status().code() == Code::kDeadlineExceeded) {
      std::lock_guard lock(mu_);
      silent_[node] = {std::chrono::steady_clock::now(), r.status()};
    }
    if (r && buf->size() == len && member_u64_or(*r, "xxh3", 0).value_or(0) == xxh3_of(buf->data(), len)) {
      out.add_mem(buf->data(), buf->size());
      out.keep(buf);
      return Status::ok();
    }
    last = r ? corrupt("bytes of '" + spec.name + "' from node " + node_id(*peers_.cluster(), node) +
                       " fail their checksum")
             : r.status();
    log::warn("reading {} of {}/{} from a peer: {}", shard.name(), v.job(), v.step(), last.to_string());
  }
  return last;
}

const std::string& PeerReader::self_id() const { return self_id_; }

Status PeerReader::read_samples(const DatasetVersion& v, const std::vector<fs::DatasetContent::Piece>& pieces,
                                fs::ReadBuffer& out) const {
  const std::string name = v.job() + "/" + v.name();
  const int home = peers_.cluster()->find(v.home());
  if (home < 0)
    return error(Code::kUnavailable, "dataset " + name + ": its home node '" + v.home() + "' is not in the cluster");
  for (size_t first = 0; first < pieces.size(); first += kPiecesPerRequest) {
    const size_t last = std::min(pieces.size(), first + kPiecesPerRequest);
    SamplesRequest req{self_id_, v.job(), v.name(), v.source().table_xxh3(), {}};
    uint64_t total = 0;
    for (size_t i = first; i < last; ++i) {
      req.pieces.push_back({pieces[i].sample, pieces[i].off, pieces[i].len});
      total += pieces[i].len;
    }
    auto buf = std::make_shared<std::string>();
    PTC_ASSIGN_OR_RETURN(json r, peers_.call_data(home, to_json(req), *buf, total),
                         "reading samples of " + name + " from node " + v.home());
    if (buf->size() != total || member_u64_or(r, "xxh3", 0).value_or(0) != xxh3_of(buf->data(), total))
      return corrupt("samples of " + name + " from node " + v.home() + " fail their checksum");
    out.add_mem(buf->data(), buf->size());
    out.keep(std::move(buf));
  }
  return Status::ok();
}

}  // namespace ptcfs
