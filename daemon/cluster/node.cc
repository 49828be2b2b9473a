#include "daemon/cluster/node.h"

#include <xxhash.h>

#include "daemon/reshard/importer.h"
#include "daemon/cluster/slab_read.h"
#include "ptc/json_util.h"
#include "ptc/log.h"

namespace ptcfs {

using nlohmann::json;

ClusterNode::ClusterNode(ptc::ClusterConfig cluster, int self, std::string secret)
    : peers_(transport::make_tcp_backend(std::move(cluster), std::move(secret))), self_(self) {}

void ClusterNode::attach(Store& store, PrepareOptions options) {
  store_ = &store;
  options_ = options;
}

ptc::Status ClusterNode::read(const StepVersion& v, const ptc::ShardId& shard, size_t slice, uint64_t off,
                              uint64_t len, fs::ReadBuffer& out) const {
  PTC_ASSIGN_OR_RETURN(auto holders, ptc::shard_nodes_on(v.layout(), cluster(), v.placement().nodes));
  const auto& nodes = holders[v.shard_index(shard)];
  if (nodes.empty()) return ptc::error(ptc::Code::kUnavailable, "shard " + shard.name() + " is held by no node");
  const ptc::Slice& sl = v.layout().slices(shard)[slice];
  const ptc::TensorSpec& spec = v.layout().tensor(sl);
  const ptc::SlabGeometry g = ptc::slab_geometry(spec, sl.local_shape);
  auto buf = std::make_shared<std::string>();
  ptc::Status last;
  // Spread readers over the replicas; go on to the next when one fails.
  const size_t start = remote_reads_.fetch_add(1) % nodes.size();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int node = nodes[(start + i) % nodes.size()];
    const json req = {{"op", "peer.read"}, {"job", v.job()},      {"step", v.step()}, {"version", v.version()},
                      {"shard", shard.name()}, {"tensor", spec.name}, {"lo", 0},         {"len", g.extent},
                      {"off", off},         {"n", len}};
    auto r = peers_->call_data(node, req, *buf, len);
    if (r && buf->size() == len && r->contains("xxh3") && (*r)["xxh3"].get<uint64_t>() == xxh3_of(buf->data(), len)) {
      out.add_mem(buf->data(), buf->size());
      out.keep(buf);
      return ptc::Status::ok();
    }
    last = r ? ptc::corrupt("bytes of '" + spec.name + "' from node " + cluster().nodes[static_cast<size_t>(node)].id +
                            " fail their checksum")
             : r.status();
    ptc::log::warn("reading {} of {}/{} from a peer: {}", shard.name(), v.job(), v.step(), last.to_string());
  }
  return last;
}

ptc::Result<transport::Reply> ClusterNode::handle_peer(const json& req) {
  const std::string op = req.value("op", "");
  if (!store_) return ptc::error(ptc::Code::kUnavailable, "node is starting");
  if (op == "peer.read") {
    auto r = serve_slab_read(*store_, req, 64 << 20);
    if (r) sent_ += r->payload.size;
    else ptc::log::warn("refused a peer read: {}", r.status().to_string());
    return r;
  }
  if (op == "peer.samples" || op == "peer.dataset_table") {
    auto r = op == "peer.samples" ? serve_samples(req) : serve_table(req);
    if (!r) ptc::log::warn("refused {}: {}", op, r.status().to_string());
    return r;
  }
  ptc::Result<json> r = ptc::invalid("unknown peer operation '" + op + "'");
  if (op == "peer.state") r = state(req);
  else if (op == "peer.dataset_state") r = dataset_state(req);
  else if (op == "peer.stats") r = json{{"bytes_sent", sent_.load()}, {"bytes_received", peers_->bytes_received()}};
  else if (op == "peer.prepare") r = prepare(req);
  else if (op == "peer.commit") r = finish(req, true);
  else if (op == "peer.abort") r = finish(req, false);
  if (!r) return r.status();
  return transport::Reply(std::move(r).value());
}

ptc::Result<json> ClusterNode::state(const json& req) const {
  const std::string job = req.value("job", ""), step = req.value("step", "");
  auto snap = store_->snapshot();
  auto it = snap->steps.find({job, step});
  if (it == snap->steps.end()) return ptc::not_found("no step " + job + "/" + step + " on node " + id());
  const StepVersion& v = *it->second;
  json held = json::array();
  for (const auto& s : v.layout().shards())
    if (v.holds(s)) held.push_back(s.name());
  return json{{"version", v.version()},
              {"nodes", v.placement().nodes},
              {"held", held},
              {"ptc", json::parse(ptc::ptc_to_json(v.layout().ptc()))}};
}

namespace {

ptc::Result<std::vector<std::string>> strings(const json& req, const char* key) {
  if (!req.contains(key) || !req[key].is_array()) return ptc::invalid(std::string("request lacks list '") + key + "'");
  std::vector<std::string> out;
  for (const auto& v : req[key]) {
    if (!v.is_string()) return ptc::invalid(std::string("'") + key + "' holds a non-string");
    out.push_back(v.get<std::string>());
  }
  return out;
}

// "{node}" in an import directory is this node's id.
std::string node_dir(std::string dir, const std::string& id) {
  for (size_t at; (at = dir.find("{node}")) != std::string::npos;) dir.replace(at, 6, id);
  return dir;
}

}  // namespace

ptc::Result<json> ClusterNode::prepare(const json& req) {
  const std::string tx = req.value("tx", "");
  if (tx.empty()) return ptc::invalid("peer.prepare lacks 'tx'");
  {
    std::lock_guard lock(mu_);
    if (prepared_.count(tx)) return ptc::error(ptc::Code::kAlreadyExists, "transaction " + tx + " is already prepared");
  }
  const std::string kind = req.value("kind", "");
  PreparedChange change;
  json reply;
  if (kind == "import") {
    PTC_ASSIGN_OR_RETURN(auto nodes, strings(req, "nodes"));
    const std::string dir = node_dir(req.value("dir", ""), id());
    ImportSummary sum;
    ptc::Ptc seen;
    auto place = [&](const ptc::Layout& layout) -> ptc::Result<StepPlacement> {
      seen = layout.ptc();
      PTC_ASSIGN_OR_RETURN(auto holders, ptc::shard_nodes_on(layout, cluster(), nodes));
      StepPlacement p{nodes, {}};
      for (const auto& h : holders) p.held.push_back(std::find(h.begin(), h.end(), self_) != h.end());
      return p;
    };
    auto r = prepare_import(*store_, dir, req.value("job", ""), req.value("step", ""), place, sum);
    if (!r) return r.status().with_context("node " + id());
    change = std::move(r).value();
    const std::string text = ptc::ptc_to_json(seen);
    reply = {{"shards", sum.shards}, {"bytes", sum.bytes}, {"ptc_digest", XXH3_64bits(text.data(), text.size())}};
  } else if (kind == "repartition") {
    ClusterChange c;
    c.job = req.value("job", "");
    c.step = req.value("step", "");
    c.from_version = req.value("from_version", uint64_t{0});
    PTC_ASSIGN_OR_RETURN(c.ptc, ptc::parse_ptc_json(req.value("ptc", json::object()).dump(), "peer.prepare ptc"));
    PTC_ASSIGN_OR_RETURN(c.from_nodes, strings(req, "from_nodes"));
    PTC_ASSIGN_OR_RETURN(c.to_nodes, strings(req, "to_nodes"));
    PTC_ASSIGN_OR_RETURN(c.down, strings(req, "down"));
    PTC_ASSIGN_OR_RETURN(c.to, ptc::parse_parallelism(req.value("to", "")));
    // The job's datasets follow its dp, in the same commit.
    auto datasets = resplit_datasets(*store_, c.job, c.to.dp);
    if (!datasets) return datasets.status().with_context("node " + id());
    auto r = prepare_cluster_part(*store_, *peers_, self_, c, req.value("digest", uint64_t{0}), options_);
    if (!r) return r.status().with_context("node " + id());
    change = std::move(r).value();
    change.datasets = std::move(datasets).value();
    reply = {{"bytes_received", change.bytes_received}};
  } else if (kind == "dataset_add" || kind == "dataset_progress") {
    auto r = prepare_dataset_part(req);
    if (!r) return r.status().with_context("node " + id());
    change = std::move(r).value();
  } else {
    return ptc::invalid("peer.prepare: unknown kind '" + kind + "'");
  }
  std::lock_guard lock(mu_);
  prepared_.emplace(tx, std::move(change));
  return reply;
}

ptc::Result<json> ClusterNode::finish(const json& req, bool commit) {
  const std::string tx = req.value("tx", "");
  PreparedChange change;
  {
    std::lock_guard lock(mu_);
    auto it = prepared_.find(tx);
    if (it == prepared_.end()) {
      if (commit) return ptc::not_found("no prepared transaction " + tx + " on node " + id());
      return json::object();  // aborting what was never prepared (or already aborted) is fine
    }
    change = std::move(it->second);
    prepared_.erase(it);
  }
  const std::string name = describe(change);
  if (!commit) {
    abort_change(*store_, change);
    ptc::log::info("aborted the change of {} (transaction {})", name, tx);
    return json::object();
  }
  auto replaced = change.replaced;
  PTC_RETURN_IF_ERROR(commit_change(*store_, change).with_context("node " + id()));
  ptc::log::info("committed {} (transaction {})", name, tx);
  change = {};
  replaced.reset();
  if (auto gc = store_->collect_garbage(); !gc) ptc::log::warn("collecting blobs: {}", gc.status().to_string());
  return json::object();
}

}  // namespace ptcfs
