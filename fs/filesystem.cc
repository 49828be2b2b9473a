#define FUSE_USE_VERSION 312
#include "fs/filesystem.h"

#include <dirent.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "fs/errno_map.h"
#include "fs/fs_impl.h"
#include "fs/mountpoint.h"
#include "fs/reply.h"
#include "fs/tree.h"
#include "fs/write_ops.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"

namespace ptcfs::fs {

namespace {

using Impl = Filesystem::Impl;

struct DirEntry {
  std::string name;
  uint64_t ino;
  bool is_dir;
  const Node* node;  // nullptr for "." and "..", which readdirplus returns without attributes
};
struct OpenDir {
  std::shared_ptr<const Tree> tree;  // keeps the entries' nodes alive
  std::vector<DirEntry> entries;     // ".", "..", then children in name order
};

// ---- logic: each returns 0 or an errno -----------------------------------------------

int do_lookup(Impl& fs, uint64_t parent, const char* name, fuse_entry_param& e) {
  auto tree = fs.current();
  const Node* p = tree->find(parent);
  if (!p) return ESTALE;
  if (!p->is_dir) return ENOTDIR;
  const Node* c = tree->child(*p, name);
  if (!c) return ENOENT;
  fill_entry(*c, e);
  return 0;
}

int do_getattr(Impl& fs, uint64_t ino, fuse_file_info* fi, struct stat& st, double& timeout) {
  timeout = kTimeout;
  if (fi && fi->fh) {
    const auto* of = reinterpret_cast<const OpenFile*>(fi->fh);
    fill_attr(of->ino, false, of->view->size(), of->mtime, of->writer != nullptr, st);
    if (of->writer) timeout = kPendingTimeout;
    return 0;
  }
  auto tree = fs.current();
  const Node* n = tree->find(ino);
  if (!n) return fs.open_attr(ino, st) ? 0 : ESTALE;  // a replaced version's file still open
  fill_node_attr(*n, st);
  timeout = attr_timeout_of(*n);
  return 0;
}

// A read of a pending file whose step is committing: the step was reported committed (ptcfs ls,
// a save's rename) before the mount's tree shows it. Waits (up to kCommitTreeWait) for a tree
// without this inode, then answers ESTALE, on which the kernel looks the name up again and
// opens the committed file; EACCES when the commit does not come (it failed: the file stays
// pending).
int wait_for_commit(Impl& fs, const std::shared_ptr<const Tree>& seen, uint64_t ino) {
  const auto deadline = std::chrono::steady_clock::now() + kCommitTreeWait;
  for (auto pause = std::chrono::milliseconds(1); std::chrono::steady_clock::now() < deadline;
       pause = std::min(pause * 2, std::chrono::milliseconds(20))) {
    auto tree = fs.current();
    // A new tree without the pending file: look the name up again. The file pending again (its
    // commit failed): no wait for a tree that will not come.
    const Node* n = tree->find(ino);
    if (tree != seen && (!n || !n->file)) return ESTALE;
    if (n && n->file && !n->file->committing()) return EACCES;
    std::this_thread::sleep_for(pause);
  }
  return EACCES;
}

int do_open(Impl& fs, uint64_t ino, fuse_file_info* fi) {
  auto tree = fs.current();
  const Node* n = tree->find(ino);
  if (!n) return ESTALE;
  if (n->is_dir) return EISDIR;
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return n->file ? do_open_for_write(*n, fi) : EROFS;
  if (n->file && n->file->committing()) return wait_for_commit(fs, tree, ino);
  if (n->file) return EACCES;  // a pending file is written, not read, until its step commits
  fi->fh = reinterpret_cast<uint64_t>(new OpenFile{n->ino, n->mtime, n->view, nullptr});
  fi->keep_cache = 1;
  struct stat st;
  fill_node_attr(*n, st);
  fs.opened(n->ino, st);
  return 0;
}

int do_read(uint64_t off, size_t size, fuse_file_info* fi, ReadBuffer& out) {
  const auto* of = reinterpret_cast<const OpenFile*>(fi->fh);
  const uint64_t total = of->view->size();
  if (off >= total || size == 0) return 0;
  const uint64_t len = std::min<uint64_t>(size, total - off);
  const Status s = of->view->read(off, len, out);
  if (!s) {
    log::error("read of inode {} at {}+{} failed: {}", of->ino, off, len, s.to_string());
    return to_errno(s);
  }
  metrics::view_read(of->view->kind(), len);
  return 0;
}

int do_opendir(Impl& fs, uint64_t ino, fuse_file_info* fi) {
  auto tree = fs.current();
  const Node* n = tree->find(ino);
  if (!n) return ESTALE;
  if (!n->is_dir) return ENOTDIR;
  auto* od = new OpenDir;
  od->entries.push_back({".", n->ino, true, nullptr});
  od->entries.push_back({"..", n->parent, true, nullptr});
  for (const auto& [name, cino] : tree->children(*n)) {
    const Node* c = tree->find(cino);
    od->entries.push_back({name, cino, c->is_dir, c});
  }
  for (const auto& [name, cino] : tree->added_children(n->ino))
    od->entries.push_back({name, cino, false, tree->find(cino)});
  od->tree = std::move(tree);
  fi->fh = reinterpret_cast<uint64_t>(od);
  return 0;
}

// ---- adapters: reply and nothing else ------------------------------------------------

void op_init(void* userdata, fuse_conn_info* conn) {
  (void)userdata;
  // libfuse derives the kernel's max_pages from max_write; reads then go up to 1 MiB.
  conn->max_write = 1 << 20;
  conn->max_readahead = 1 << 20;
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  conn->want |= FUSE_CAP_ASYNC_READ;
  // Always readdirplus (not only for a folder's first entries): names come with attributes.
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_READDIRPLUS_AUTO);
  conn->want &= ~static_cast<unsigned>(FUSE_CAP_AUTO_INVAL_DATA);  // files never change under an inode
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  metrics::FuseTimer timer(metrics::FuseOp::kLookup);
  fuse_entry_param e;
  const int err = do_lookup(impl_of(req), parent, name, e);
  if (err)
    fuse_reply_err(req, err);
  else
    fuse_reply_entry(req, &e);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kGetattr);
  struct stat st;
  double timeout = 0;
  const int err = do_getattr(impl_of(req), ino, fi, st, timeout);
  if (err)
    fuse_reply_err(req, err);
  else
    fuse_reply_attr(req, &st, timeout);
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kOpen);
  const int err = do_open(impl_of(req), ino, fi);
  if (err) {
    fuse_reply_err(req, err);
  } else if (fuse_reply_open(req, fi) != 0) {
    auto* of = reinterpret_cast<OpenFile*>(fi->fh);  // the open was interrupted
    if (!of->writer) impl_of(req).closed(of->ino);
    delete of;
  }
}

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kRead);
  ReadBuffer rb;
  const int err = do_read(static_cast<uint64_t>(off), size, fi, rb);
  if (err) {
    fuse_reply_err(req, err);
    return;
  }
  // Many small pieces: one gathered buffer and one write beat the kernel pinning each one.
  if (auto s = rb.gather_if_fragmented(16, 64 << 10); !s) {
    fuse_reply_err(req, to_errno(s));
    return;
  }
  reply_read(req, rb);
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kRelease);
  auto* of = reinterpret_cast<OpenFile*>(fi->fh);
  if (of->writer)
    of->writer->release(of->writer_id);
  else
    impl_of(req).closed(of->ino);
  delete of;
  fuse_reply_err(req, 0);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kReaddir);
  const int err = do_opendir(impl_of(req), ino, fi);
  if (err) {
    fuse_reply_err(req, err);
  } else if (fuse_reply_open(req, fi) != 0) {
    delete reinterpret_cast<OpenDir*>(fi->fh);
  }
}

// One page of a folder's entries from `off`; with `plus` (readdirplus) each comes with its
// attributes, so `ls -l` of a folder of 10,000 tensors needs no LOOKUP per file. Attributes
// go only from the current tree: a folder opened before a commit must not put the old
// version's names back into the kernel's cache after refresh() dropped them.
void reply_dir(fuse_req_t req, size_t size, off_t off, fuse_file_info* fi, bool plus) {
  const auto* od = reinterpret_cast<const OpenDir*>(fi->fh);
  const bool attrs = plus && od->tree == impl_of(req).current();
  std::vector<char> buf(size);
  size_t used = 0;
  for (size_t i = static_cast<size_t>(off); i < od->entries.size(); ++i) {
    const DirEntry& d = od->entries[i];
    fuse_entry_param e;
    if (attrs && d.node) {
      fill_entry(*d.node, e);
    } else {  // for readdirplus, ino 0: the kernel takes no attributes (nor a lookup) for the entry
      std::memset(&e, 0, sizeof e);
      e.attr.st_ino = d.ino;
      e.attr.st_mode = d.is_dir ? S_IFDIR : S_IFREG;
    }
    char* at = buf.data() + used;
    const auto next = static_cast<off_t>(i + 1);
    const size_t n = plus ? fuse_add_direntry_plus(req, at, size - used, d.name.c_str(), &e, next)
                          : fuse_add_direntry(req, at, size - used, d.name.c_str(), &e.attr, next);
    if (n > size - used) break;
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void op_readdir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kReaddir);
  reply_dir(req, size, off, fi, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kReaddir);
  reply_dir(req, size, off, fi, true);
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kOther);
  delete reinterpret_cast<OpenDir*>(fi->fh);
  fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  metrics::FuseTimer timer(metrics::FuseOp::kOther);
  struct statvfs sv {};
  sv.f_bsize = 1 << 20;
  sv.f_frsize = 4096;
  sv.f_namemax = 255;
  fuse_reply_statfs(req, &sv);
}

const fuse_lowlevel_ops kOps = [] {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.getattr = op_getattr;
  ops.open = op_open;
  ops.read = op_read;
  ops.release = op_release;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.readdirplus = op_readdirplus;
  ops.releasedir = op_releasedir;
  ops.statfs = op_statfs;
  ops.mkdir = op_mkdir;
  ops.create = op_create;
  ops.write = op_write;
  ops.flush = op_flush;
  ops.fsync = op_fsync;
  ops.setattr = op_setattr;
  ops.unlink = op_unlink;
  ops.rmdir = op_rmdir;
  ops.rename = op_rename;
  return ops;
}();

void wake_handler(int) {}

}  // namespace

Filesystem::Filesystem(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Filesystem>> Filesystem::mount(const MountOptions& opts, Source source, WriteTarget* target) {
  PTC_RETURN_IF_ERROR(prepare_mountpoint(opts.mountpoint));
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  impl->source = std::move(source);
  impl->target = target;

  std::string o = std::string(target ? "rw" : "ro") + ",default_permissions,fsname=ptcfs,subtype=ptcfs";
  if (opts.allow_other) o += ",allow_other";
  std::vector<std::string> args = {"ptcfsd", "-o", o};
  if (opts.debug) args.push_back("-d");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  impl->se = fuse_session_new(&fargs, &kOps, sizeof kOps, impl.get());
  if (!impl->se) return internal("fuse_session_new failed (see the messages above)");
  if (fuse_session_mount(impl->se, opts.mountpoint.c_str()) != 0) {
    fuse_session_destroy(impl->se);
    impl->se = nullptr;
    return io_error("mounting FUSE at " + opts.mountpoint + " (is /dev/fuse there, are you root?)", EIO);
  }
  raise_readahead(opts.mountpoint, 1024);
  struct sigaction sa {};
  sa.sa_handler = wake_handler;  // no SA_RESTART: the loop's wait returns EINTR
  sigemptyset(&sa.sa_mask);
  ::sigaction(kWakeSignal, &sa, nullptr);
  std::unique_ptr<Filesystem> fs(new Filesystem(std::move(impl)));
  PTC_RETURN_IF_ERROR(fs->refresh());
  log::info("mounted at {}", opts.mountpoint);
  return fs;
}

Filesystem::~Filesystem() {
  stop();
  if (impl_->se) {
    fuse_session_unmount(impl_->se);
    fuse_session_destroy(impl_->se);
    log::info("unmounted {}", impl_->opts.mountpoint);
  }
}

Status Filesystem::Impl::rebuild() {
  std::lock_guard serial(build_mu);
  PTC_ASSIGN_OR_RETURN(auto next, Tree::build(contents(), current().get()));
  std::lock_guard lock(mu);
  tree = std::move(next);
  return Status::ok();
}

Result<std::shared_ptr<const Tree>> Filesystem::Impl::add_node(Node node, const std::string& name) {
  std::lock_guard serial(build_mu);
  auto cur = current();
  std::shared_ptr<const Tree> next = Tree::with_node(cur, std::move(node), name);
  if (!next) {
    PTC_ASSIGN_OR_RETURN(next, Tree::build(contents(), cur.get()));
  }
  std::lock_guard lock(mu);
  tree = next;
  return next;
}

Result<std::shared_ptr<const View>> Filesystem::open_view(const std::string& path) const {
  const auto tree = impl_->current();
  const Node* node = tree->find(kRootIno);
  size_t at = 0;
  while (node && at < path.size()) {
    const size_t slash = path.find('/', at);
    const std::string name = path.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    at = slash == std::string::npos ? path.size() : slash + 1;
    if (name.empty() || name == ".") continue;
    if (!node->is_dir) return not_found("no file " + path + " in the mount");
    node = tree->child(*node, name);
  }
  if (!node) return not_found("no file " + path + " in the mount");
  if (node->is_dir) return invalid(path + " is a folder, not a file");
  if (node->pending || !node->view)
    return error(Code::kFailedPrecondition, path + " belongs to a step still being saved; read it once committed");
  return node->view;
}

Status Filesystem::refresh() {
  std::shared_ptr<const Tree> tree, old;
  {
    std::lock_guard serial(impl_->build_mu);
    PTC_ASSIGN_OR_RETURN(tree, Tree::build(impl_->contents(), impl_->current().get()));
    std::lock_guard lock(impl_->mu);
    old = std::move(impl_->tree);
    impl_->tree = tree;
  }
  // The kernel caches names for kTimeout: drop every cached name whose inode changed or
  // went away (a repartition gives a step's files new inodes), so the next lookup sees
  // the new tree. Never called from a request handler, as libfuse requires.
  if (!impl_->loop_running || !old) return Status::ok();
  size_t dropped = 0;
  // Lazy folders never looked in hold no name the kernel can have cached: skipped.
  old->for_each_made_dir([&](uint64_t dir, const std::map<std::string, uint64_t>& entries) {
    const auto* now = tree->made_children(dir);
    for (const auto& [name, ino] : entries) {
      if (now) {
        auto it = now->find(name);
        if (it != now->end() && it->second == ino) continue;
      }
      const int rc = fuse_lowlevel_notify_inval_entry(impl_->se, dir, name.c_str(), name.size());
      if (rc != 0 && rc != -ENOENT) log::debug("invalidating {}: {}", name, std::strerror(-rc));
      ++dropped;
    }
  });
  if (dropped) log::debug("refresh invalidated {} names", dropped);
  return Status::ok();
}

Status Filesystem::run() {
  impl_->loop_thread = pthread_self();
  impl_->loop_running = true;
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(cfg, impl_->opts.max_threads);
  fuse_loop_cfg_set_idle_threads(cfg, 4);
  const int rc = fuse_session_loop_mt(impl_->se, cfg);
  fuse_loop_cfg_destroy(cfg);
  impl_->loop_running = false;
  if (rc < 0 && rc != -EINTR) return io_error("FUSE loop", -rc);
  return Status::ok();
}

void Filesystem::stop() {
  if (!impl_->se) return;
  fuse_session_exit(impl_->se);
  if (impl_->loop_running) pthread_kill(impl_->loop_thread, kWakeSignal);
}

}  // namespace ptcfs::fs
