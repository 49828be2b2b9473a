// A stock DCP save becomes the step's tensor files (daemon/save/save_service.h, dcp_save.h):
// on one node, or through one node's mount on a cluster, that node converts it all when its
// .metadata lands; when its ranks wrote through several nodes' mounts, each node converts the
// shards it holds (daemon/save/dcp_peers.h), and the step commits on every node together.
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "daemon/save/hf_save.h"
#include "daemon/save/save_service.h"
#include "daemon/save/staged_file.h"
#include "ptc/base/log.h"

namespace ptcfs {

namespace {

// How long the rename that ends a stock DCP save waits for the step's commit.
constexpr auto kCommitWait = std::chrono::minutes(30);
// How long it then waits for the other converting nodes to serve it too.
constexpr auto kPeersCommitWait = std::chrono::seconds(30);

// The save as planned from its metadata, reading each chunk's torch.save record with `read`.
Result<DcpSave> plan_from(const formats::DcpMetadata& md, const DcpFileReader& read, const std::string& where) {
  auto item = [&](const formats::DcpItem& t, const formats::DcpChunk& c) {
    return formats::read_torch_tensor_item(
        c.length, [&](uint64_t off, uint64_t len) { return read(c.file, c.offset + off, len); },
        where + "/" + c.file + " (chunk of '" + t.fqn + "' at " + ptc::shape_string(c.offsets) + ")");
  };
  return plan_dcp_save(md, item, where);
}

// This node's part of a save across nodes failed: ls says why, and the part never says it is ready.
Status fail_part(PendingStep& s, const Status& st) {
  {
    MutexLock lock(s.mu);
    if (s.failure.empty()) s.failure = "stock DCP save: " + st.message();
  }
  log::warn("stock DCP save {}: {}", s.name(), st.to_string());
  return st;
}

// Reads a .distcp file of the save at `where` (job/step): from this node's staged files
// (`staged`, looked up once), or from the node `file_nodes` names (through `peers`).
DcpFileReader save_reader(const std::string& where, const std::string& job, const std::string& step,
                          std::map<std::string, std::shared_ptr<StagedFile>> staged,
                          const std::map<std::string, std::string>& file_nodes, const std::string& self,
                          DcpPeers* peers) {
  return [=, &file_nodes, staged = std::move(staged)](const std::string& file, uint64_t off,
                                                      uint64_t len) -> Result<std::string> {
    auto node = file_nodes.find(file);
    if (node == file_nodes.end() || file == kDcpMetadataTmp) return not_found(where + "/" + file + " was not written");
    if (node->second != self) return peers->read(node->second, job, step, file, off, len);
    auto it = staged.find(file);
    if (it == staged.end()) return not_found(where + "/" + file + " is not staged here");
    return it->second->read(off, len);
  };
}

std::vector<bool> shards_of(const std::vector<std::string>& holders, const std::string& node) {
  std::vector<bool> mine(holders.size());
  for (size_t t = 0; t < holders.size(); ++t) mine[t] = holders[t] == node;
  return mine;
}

}  // namespace

Result<bool> SaveService::rename(const std::string& job, const std::string& step, const std::string& from,
                                 const std::string& to) {
  const std::string where = job + "/" + step + "/" + from;
  if (is_hf_rename(from, to)) {
    PTC_RETURN_IF_ERROR(rename_hf(job, step, from, to));
    return false;
  }
  if (from != kDcpMetadataTmp || to != kDcpMetadata)
    return error(Code::kPermissionDenied,
                 where +
                     ": files of a step are written in place; the renames are a stock DCP save's "
                     ".metadata.tmp to .metadata and save_pretrained's temporaries to their safetensors names");
  auto s = find(job, step);
  if (!s) return error(Code::kPermissionDenied, job + "/" + step + " is not being saved");
  {
    MutexLock lock(s->mu);
    if (s->committing || s->removed || s->converting)
      return error(Code::kPermissionDenied, s->name() + " is no longer pending");
    if (!s->staged.count(from)) return not_found(where + " does not exist");
    s->converting = true;
  }
  std::vector<std::string> peers;  // the other nodes that convert their part
  auto save = convert_dcp(s, peers);
  PTC_RETURN_IF_ERROR(commit_converted(s, "stock DCP save", save));
  // Every rank's dcp.save returns with this rename: a load through any node's mount right after
  // must find the step committed there too.
  if (!peers.empty())
    if (auto w = dcp_peers_->wait_committed(peers, job, step, kPeersCommitWait); !w)
      // Committed: the node that is late catches up on its own; failing the save now would
      // have it saved again into a step that exists.
      log::warn("stock DCP save {}/{}: committed, but {}", job, step, w.message());
  return true;
}

Status SaveService::commit_converted(const std::shared_ptr<PendingStep>& s, const std::string& what,
                                     const Result<DcpSave>& save) {
  {
    MutexLock lock(s->mu);
    if (save) {
      for (auto& [rel, f] : s->staged) f->kill();  // their bytes are in the tensor files now
      s->staged.clear();
      s->stamp = std::make_shared<int>(0);
    }
  }
  Status st = save ? write_dcp_ptc(*this, s->job, s->step, *save) : save.status();
  if (!st) {
    MutexLock lock(s->mu);
    s->failure = what + ": " + st.message();
    log::warn("{} {}: {}", what, s->name(), st.to_string());
    return st;
  }
  return wait_committed(s);
}

Status SaveService::wait_committed(const std::shared_ptr<PendingStep>& s) const {
  // torch's save returns when the rename does: a load right after it must find the step.
  const auto deadline = std::chrono::steady_clock::now() + kCommitWait;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (store_.snapshot()->steps.count({s->job, s->step})) return Status::ok();
    {
      MutexLock lock(s->mu);
      if (!s->failure.empty()) return io_error(s->name() + ": the commit failed: " + s->failure, EIO);
      if (s->removed) return error(Code::kFailedPrecondition, s->name() + " was removed before it committed");
    }
    if (std::chrono::steady_clock::now() > deadline)
      return error(Code::kDeadlineExceeded, s->name() + ": written in full but not committed after 30 minutes");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

Result<DcpSave> SaveService::convert_dcp(const std::shared_ptr<PendingStep>& s, std::vector<std::string>& peers) {
  std::map<std::string, std::shared_ptr<StagedFile>> staged;
  {
    MutexLock lock(s->mu);
    staged = s->staged;
  }
  const std::string where = s->name();
  std::map<std::string, uint64_t> sizes;
  for (const auto& [rel, f] : staged) {
    PTC_ASSIGN_OR_RETURN(uint64_t size, f->seal());
    if (rel != kDcpMetadataTmp) sizes[rel] = size;
  }
  const std::string text = staged.at(kDcpMetadataTmp)->text();
  PTC_ASSIGN_OR_RETURN(formats::DcpMetadata md, formats::parse_dcp_metadata(text, where + "/.metadata"));
  // On a cluster the other nodes' ranks may have written files of the save through their mounts.
  const std::string self = dcp_peers_ ? dcp_peers_->self() : std::string();
  std::map<std::string, std::string> file_nodes;  // .distcp file -> the node that staged it
  for (const auto& [file, size] : sizes) file_nodes[file] = self;
  std::map<std::string, std::map<std::string, uint64_t>> others;  // node -> its staged files
  if (dcp_peers_) {                                               // a cluster's
    PTC_ASSIGN_OR_RETURN(others, dcp_peers_->staged_files(s->job, s->step));
    for (const auto& [node, files] : others) peers.push_back(node);
  }
  auto converted = [&]() -> Result<DcpSave> {
    for (const auto& [node, files] : others)
      for (const auto& [file, size] : files) {
        if (auto [it, fresh] = file_nodes.emplace(file, node); !fresh)
          return invalid(where + ": " + file + " was written through the mounts of both " + it->second + " and " +
                         node + " (each rank writes its own files once)");
        sizes[file] = size;
      }
    for (const auto& it : md.items)
      for (const auto& c : it.chunks)
        if (!sizes.count(c.file))
          return invalid(where + ": '" + it.fqn + "' lies in " + c.file + ", which was not written through " +
                         (dcp_peers_ ? "any live node's mount" : "the mount") + " (remove the step with ptcfs rm " +
                         s->job + "/" + s->step + " and save it again)");
    PTC_RETURN_IF_ERROR(formats::check_dcp_references(md, sizes, where));
    const DcpFileReader read = save_reader(where, s->job, s->step, staged, file_nodes, self, dcp_peers_);
    PTC_ASSIGN_OR_RETURN(DcpSave save, plan_from(md, read, where));
    log::info("stock DCP save {}: {} tensors at {}, {} bytes from {} files{}", where, save.ptc.tensors.size(),
              save.ptc.parallelism.to_string(), save.bytes, sizes.size(),
              peers.empty() ? "" : " on " + std::to_string(peers.size() + 1) + " nodes");
    if (peers.empty()) {
      PTC_RETURN_IF_ERROR(write_dcp_tensors(*this, s->job, s->step, save, read));
      return save;
    }
    // Each shard is held where the most of its bytes were written; every node converts its own,
    // reading the rest from the others' staged files (which stay until the step commits there).
    DcpConvertRequest req;
    req.job = s->job;
    req.step = s->step;
    req.from = self;
    req.metadata_size = text.size();
    req.files = file_nodes;
    req.shards = dcp_shard_holders(save, file_nodes, self);
    auto theirs = std::async(std::launch::async, [&] { return dcp_peers_->convert(peers, req); });
    const Status mine = write_dcp_tensors(*this, s->job, s->step, save, read, shards_of(req.shards, self));
    const std::vector<Status> outcomes = theirs.get();
    for (size_t i = 0; i < peers.size(); ++i)
      if (!outcomes[i]) return outcomes[i].with_context("node " + peers[i] + " converting its part of " + where);
    PTC_RETURN_IF_ERROR(mine);
    std::set<std::string> holders(req.shards.begin(), req.shards.end());
    log::info("stock DCP save {}: {} shards held on {} of {} nodes", where, req.shards.size(), holders.size(),
              peers.size() + 1);
    return save;
  };
  auto save = converted();
  if (!save && !peers.empty()) {
    // The other nodes sealed their files for this save: their parts fail too, saying why (a part
    // that converted would otherwise say it is ready, every 5 s, for a commit that cannot come).
    DcpConvertRequest notice;
    notice.job = s->job;
    notice.step = s->step;
    notice.from = self;
    notice.failed = "the save failed on node " + self + ": " + save.status().message();
    dcp_peers_->convert(peers, notice);
  }
  return save;
}

Result<std::optional<std::map<std::string, uint64_t>>> SaveService::staged_files(const std::string& job,
                                                                                 const std::string& step) {
  auto s = find(job, step);
  if (!s) return std::optional<std::map<std::string, uint64_t>>();
  std::map<std::string, std::shared_ptr<StagedFile>> staged;
  {
    MutexLock lock(s->mu);
    if (s->committing || s->removed || s->converting)
      return error(Code::kFailedPrecondition, s->name() + " is no longer pending here");
    if (!s->files.empty())
      return invalid(s->name() + " is being written here as ptcfs files (" + s->files.begin()->first +
                     "), not by a stock DCP save");
    s->converting = true;  // no more files: the save's metadata landed elsewhere
    staged = s->staged;
  }
  std::map<std::string, uint64_t> out;
  for (const auto& [rel, f] : staged) {
    if (rel == kDcpMetadataTmp)
      return invalid(s->name() + ": this node's mount has a .metadata.tmp too (one rank writes it)");
    PTC_ASSIGN_OR_RETURN(out[rel], f->seal());
  }
  return std::optional<std::map<std::string, uint64_t>>(std::move(out));
}

Result<std::string> SaveService::read_staged(const std::string& job, const std::string& step, const std::string& file,
                                             uint64_t off, uint64_t len) const {
  auto s = find(job, step);
  if (!s) return not_found("no step " + job + "/" + step + " is being saved here");
  std::shared_ptr<StagedFile> f;
  {
    MutexLock lock(s->mu);
    auto it = s->staged.find(file);
    if (it == s->staged.end()) return not_found(s->name() + "/" + file + " is not staged here");
    f = it->second;
  }
  return f->read(off, len);
}

Status SaveService::convert_part(const DcpConvertRequest& req) {
  auto s = find(req.job, req.step);
  if (!s) return not_found("no step " + req.job + "/" + req.step + " is being saved here");
  if (!req.failed.empty()) {
    (void)fail_part(*s, error(Code::kFailedPrecondition, req.failed));
    return Status::ok();
  }
  try {
    return convert_part(s, req);
  } catch (const std::exception& e) {  // an allocation, say: the part fails, saying so
    return fail_part(*s, internal(std::string("converting this node's part: ") + e.what()));
  }
}

Status SaveService::convert_part(const std::shared_ptr<PendingStep>& s, const DcpConvertRequest& req) {
  const std::string where = s->name();
  const std::string self = dcp_peers_ ? dcp_peers_->self() : std::string();
  auto fail = [&](const Status& st) { return fail_part(*s, st); };
  if (!dcp_peers_) return fail(internal(where + ": this node has no peers to read the save from"));
  std::map<std::string, std::shared_ptr<StagedFile>> staged;
  {
    MutexLock lock(s->mu);
    staged = s->staged;
  }
  const DcpFileReader read = save_reader(where, req.job, req.step, std::move(staged), req.files, self, dcp_peers_);
  auto text = dcp_peers_->read(req.from, req.job, req.step, kDcpMetadataTmp, 0, req.metadata_size);
  if (!text) return fail(text.status());
  auto md = formats::parse_dcp_metadata(*text, where + "/.metadata");
  if (!md) return fail(md.status());
  auto save = plan_from(*md, read, where);
  if (!save) return fail(save.status());
  if (static_cast<int>(req.shards.size()) != save->ptc.parallelism.tp)
    return fail(invalid(where + ": the request names holders of " + std::to_string(req.shards.size()) +
                        " shards, the save plans " + std::to_string(save->ptc.parallelism.tp)));
  const std::vector<bool> mine = shards_of(req.shards, self);
  if (auto st = write_dcp_tensors(*this, req.job, req.step, *save, read, mine); !st) return fail(st);
  if (auto st = write_dcp_ptc(*this, req.job, req.step, *save); !st) return fail(st);
  log::info("stock DCP save {}: converted this node's part ({} of {} shards)", where,
            std::count(mine.begin(), mine.end(), true), mine.size());
  return Status::ok();
}

}  // namespace ptcfs
