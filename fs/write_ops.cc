// The save path's FUSE operations (docs/FORMATS.md "Saving into the mount"): mkdir of a job, a
// step or a folder of a pending step; create, write, flush, release, truncate and unlink of
// its files. Each is a logic function returning an errno and an adapter that replies, as in
// filesystem.cc. The daemon's WriteTarget owns the pending steps; here a folder's path says
// what it is: the root takes jobs, a job takes steps, a pending step takes folders and files.
// Committed steps stay read-only (EROFS).
#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "fs/errno_map.h"
#include "fs/fs_impl.h"
#include "fs/write_ops.h"
#include "ptc/base/log.h"
#include "ptc/base/metrics.h"

namespace ptcfs::fs {
namespace {

using Impl = Filesystem::Impl;

// Where a new entry `name` in folder `dir` goes: job and step ("" when it is the job or the
// step being made) and the path inside the step.
struct Place {
  std::string job, step, rel;
};

Place place_of(const Node& dir, const std::string& name) {
  const std::string full = dir.path.empty() ? name : dir.path + "/" + name;
  Place p;
  const size_t a = full.find('/');
  p.job = full.substr(0, a);
  if (a == std::string::npos) return p;
  const size_t b = full.find('/', a + 1);
  p.step = full.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  if (b != std::string::npos) p.rel = full.substr(b + 1);
  return p;
}

int fail(const char* what, const Place& p, const Status& s) {
  log::warn("{} {}/{}/{} refused: {}", what, p.job, p.step, p.rel, s.to_string());
  return to_errno(s);
}

// The writable folder `parent` of the current tree, or an errno.
int writable_dir(Impl& fs, uint64_t parent, std::shared_ptr<const Tree>& tree, const Node*& dir) {
  if (!fs.target) return EROFS;
  tree = fs.current();
  dir = tree->find(parent);
  if (!dir) return ESTALE;
  if (!dir->is_dir) return ENOTDIR;
  if (!dir->writable) return EROFS;  // a committed step, or a folder of one
  return 0;
}

// After a change of names: the new tree, and the entry of `name` in `parent`. `*out` points
// into `tree`, which the caller keeps while it uses the node (another writer's create or a
// commit may swap the filesystem's tree at any time).
int entry_after(Impl& fs, uint64_t parent, const char* name, fuse_entry_param& e, std::shared_ptr<const Tree>& tree,
                const Node** out = nullptr) {
  if (auto s = fs.rebuild(); !s) return to_errno(s);
  tree = fs.current();
  const Node* dir = tree->find(parent);
  const Node* n = dir ? tree->child(*dir, name) : nullptr;
  if (!n) return EIO;  // made, but not shown: the log says why
  fill_entry(*n, e);
  if (out) *out = n;
  return 0;
}

// A folder or file of a pending step, made in `dir`: the node a build would make of it.
Node pending_node(const Node& dir, const std::string& name, bool is_dir) {
  Node n;
  const std::string path = "/" + dir.path + "/" + name;
  n.ino = is_dir ? Tree::dir_ino(path) : Tree::pending_file_ino(path);
  n.parent = dir.ino;
  n.is_dir = is_dir;
  n.mtime = dir.mtime;
  if (is_dir) n.path = path.substr(1);
  n.writable = n.pending = true;
  return n;
}

int do_mkdir(Impl& fs, uint64_t parent, const char* name, fuse_entry_param& e) {
  std::shared_ptr<const Tree> tree;
  const Node* dir = nullptr;
  if (int err = writable_dir(fs, parent, tree, dir)) return err;
  if (tree->child(*dir, name)) return EEXIST;
  const Place p = place_of(*dir, name);
  Status s = p.step.empty()  ? fs.target->make_job(p.job)
             : p.rel.empty() ? fs.target->make_step(p.job, p.step)
                             : fs.target->make_dir(p.job, p.step, p.rel);
  if (!s) return fail("mkdir", p, s);
  std::shared_ptr<const Tree> after;
  if (p.rel.empty()) return entry_after(fs, parent, name, e, after);  // a job or a step: few, built
  // A folder of a pending step: added to the current tree, as a create adds a file.
  const uint64_t ino = Tree::dir_ino("/" + dir->path + "/" + name);
  auto next = fs.add_node(pending_node(*dir, name, true), name);
  if (!next) return to_errno(next.status());
  after = std::move(next).value();
  const Node* n = after->find(ino);
  if (!n) return EIO;
  fill_entry(*n, e);
  return 0;
}

int do_create(Impl& fs, uint64_t parent, const char* name, fuse_file_info* fi, fuse_entry_param& e) {
  std::shared_ptr<const Tree> tree;
  const Node* dir = nullptr;
  if (int err = writable_dir(fs, parent, tree, dir)) return err;
  const Place p = place_of(*dir, name);
  if (p.rel.empty()) return EPERM;  // files live in a step's folder, not beside jobs or steps
  auto open_existing = [&](const Node& old) {
    if (old.is_dir) return EISDIR;
    fill_entry(old, e);
    return do_open_for_write(old, fi);
  };
  if (const Node* old = tree->child(*dir, name)) return fi->flags & O_EXCL ? EEXIST : open_existing(*old);
  auto f = fs.target->create(p.job, p.step, p.rel);
  if (!f && f.status().code() == Code::kAlreadyExists && !(fi->flags & O_EXCL)) {
    // Another writer created it in the meantime (several ranks open one tensor file at once).
    if (auto s = fs.rebuild(); !s) return to_errno(s);
    tree = fs.current();
    const Node* d = tree->find(parent);
    const Node* old = d ? tree->child(*d, name) : nullptr;
    return old ? open_existing(*old) : EEXIST;
  }
  if (!f) return fail("create", p, f.status());
  // Its creator opens it like any writer: one that opened it in the meantime may hold it (EBUSY).
  auto id = (*f)->open_writer();
  if (!id) return fail("create", p, id.status());
  // The new file's node, added to the current tree without building it again: the same node
  // a rebuild makes of it (its inode tags the path "pending").
  Node node = pending_node(*dir, name, false);
  const uint64_t ino = node.ino;
  node.view = pending_view(*f);
  node.file = *f;
  auto next = fs.add_node(std::move(node), name);
  if (!next) {
    (*f)->release(*id);
    return to_errno(next.status());
  }
  tree = std::move(next).value();  // keeps the node alive while it is used below
  const Node* n = tree->find(ino);
  if (!n) {
    (*f)->release(*id);
    return EIO;
  }
  fill_entry(*n, e);
  fi->fh = reinterpret_cast<uint64_t>(new OpenFile{n->ino, n->mtime, n->view, *f, *id});
  fi->direct_io = 1;  // (do_open_for_write says why)
  return 0;
}

int do_write(fuse_file_info* fi, const char* buf, size_t size, off_t off) {
  auto* of = reinterpret_cast<OpenFile*>(fi->fh);
  if (!of->writer) return EBADF;
  if (off < 0) return EINVAL;
  if (auto s = of->writer->write(of->writer_id, static_cast<uint64_t>(off), buf, size); !s) {
    log::warn("write of {} bytes at {} refused: {}", size, off, s.to_string());
    return to_errno(s);
  }
  return 0;
}

int do_unlink(Impl& fs, uint64_t parent, const char* name) {
  std::shared_ptr<const Tree> tree;
  const Node* dir = nullptr;
  if (int err = writable_dir(fs, parent, tree, dir)) return err;
  const Node* n = tree->child(*dir, name);
  if (!n) return ENOENT;
  if (n->is_dir) return EISDIR;
  const Place p = place_of(*dir, name);
  if (p.rel.empty()) return EPERM;
  if (auto s = fs.target->unlink(p.job, p.step, p.rel); !s) return fail("unlink", p, s);
  if (auto s = fs.rebuild(); !s) return to_errno(s);
  return 0;
}

// How long a rename that committed a step waits for the mount to show it.
constexpr auto kShowWait = std::chrono::seconds(60);

int do_rename(Impl& fs, uint64_t parent, const char* name, uint64_t newparent, const char* newname,
              unsigned int flags) {
  std::shared_ptr<const Tree> tree;
  const Node* dir = nullptr;
  if (int err = writable_dir(fs, parent, tree, dir)) return err;
  if (newparent != parent || flags != 0) return EPERM;  // within a step's folder (WriteTarget::rename)
  const Node* n = tree->child(*dir, name);
  if (!n) return ENOENT;
  const Place from = place_of(*dir, name), to = place_of(*dir, newname);
  if (from.rel.empty()) return EPERM;
  auto committed = fs.target->rename(from.job, from.step, from.rel, to.rel);
  if (!committed) {  // a rename no step takes is EPERM, as rename(2) says of one the filesystem refuses
    const int err = fail("rename", from, committed.status());
    return err == EACCES ? EPERM : err;
  }
  if (!*committed) return 0;
  const uint64_t step_ino = Tree::dir_ino("/" + from.job + "/" + from.step);
  const auto deadline = std::chrono::steady_clock::now() + kShowWait;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto now = fs.current();
    const Node* d = now->find(step_ino);
    if (d && !d->pending) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  log::warn("{}/{} committed, but the mount did not show it within 60 s", from.job, from.step);
  return 0;
}

}  // namespace

int do_open_for_write(const Node& n, fuse_file_info* fi) {
  if (!n.file) return EROFS;
  // Opened first: a file another writer holds is not cut by this open's O_TRUNC.
  auto id = n.file->open_writer();
  if (!id) {
    log::warn("open for writing refused: {}", id.status().to_string());
    return to_errno(id.status());
  }
  if (fi->flags & O_TRUNC) {
    if (auto s = n.file->truncate(*id, 0); !s) {
      n.file->release(*id);
      return to_errno(s);
    }
  }
  fi->fh = reinterpret_cast<uint64_t>(new OpenFile{n.ino, n.mtime, n.view, n.file, *id});
  // The kernel passes the writer's bytes on as they are, not through pages of its own cache
  // for this file: a pending file is never read, so those pages would only cost a copy, memory
  // and the page allocations of every write (the bytes are in the blob's pages once written).
  // Writes still come as requests of at most max_write.
  fi->direct_io = 1;
  return 0;
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t) {
  metrics::FuseTimer timer(metrics::FuseOp::kCreate);
  fuse_entry_param e;
  const int err = do_mkdir(impl_of(req), parent, name, e);
  if (err)
    fuse_reply_err(req, err);
  else
    fuse_reply_entry(req, &e);
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kCreate);
  fuse_entry_param e;
  const int err = do_create(impl_of(req), parent, name, fi, e);
  if (err) {
    fuse_reply_err(req, err);
  } else if (fuse_reply_create(req, &e, fi) != 0) {  // interrupted: the writer never got it
    auto* of = reinterpret_cast<OpenFile*>(fi->fh);
    of->writer->release(of->writer_id);
    delete of;
  }
}

void op_write(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kWrite);
  const int err = do_write(fi, buf, size, off);
  if (err)
    fuse_reply_err(req, err);
  else
    fuse_reply_write(req, size);
}

void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kWrite);
  const auto* of = reinterpret_cast<const OpenFile*>(fi->fh);
  int err = 0;
  if (of->writer) {
    if (auto s = of->writer->flush(of->writer_id); !s) {
      log::warn("close of a file being saved: {}", s.to_string());
      err = to_errno(s);
    }
  }
  fuse_reply_err(req, err);
}

// Written bytes are synced when their step commits (before it becomes visible).
void op_fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { fuse_reply_err(req, 0); }

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  metrics::FuseTimer timer(metrics::FuseOp::kOther);
  Impl& fs = impl_of(req);
  auto tree = fs.current();
  const Node* n = tree->find(ino);
  if (!n) {
    fuse_reply_err(req, ESTALE);
    return;
  }
  if (!n->writable) {
    fuse_reply_err(req, EROFS);
    return;
  }
  if ((to_set & FUSE_SET_ATTR_SIZE) && n->file) {
    // ftruncate and O_TRUNC come through a handle; truncate(2) of a path through none (writer 0).
    const auto* of = fi ? reinterpret_cast<const OpenFile*>(fi->fh) : nullptr;
    const uint64_t writer = of && of->writer ? of->writer_id : 0;
    if (auto s = n->file->truncate(writer, static_cast<uint64_t>(attr->st_size)); !s) {
      log::warn("truncate to {} refused: {}", attr->st_size, s.to_string());
      fuse_reply_err(req, to_errno(s));
      return;
    }
  }
  // Modes, owners and times of pending entries are not kept (cp -p, shutil.copy ask).
  struct stat st;
  fill_node_attr(*n, st);
  fuse_reply_attr(req, &st, 0.0);
}

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  metrics::FuseTimer timer(metrics::FuseOp::kOther);
  fuse_reply_err(req, do_unlink(impl_of(req), parent, name));
}

// Folders of a pending step go with the step (`ptcfs rm JOB/STEP`); committed ones are read-only.
void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char*) {
  metrics::FuseTimer timer(metrics::FuseOp::kOther);
  Impl& fs = impl_of(req);
  auto tree = fs.current();
  const Node* dir = tree->find(parent);
  fuse_reply_err(req, dir && dir->writable && fs.target ? EPERM : EROFS);
}

// Files are written in place; the renames are a stock DCP save's .metadata.tmp to .metadata,
// which commits the step, and a save_pretrained's temporaries to their names (WriteTarget::rename).
// The first returns once the step is committed and the mount shows it: torch's dcp.save returns
// then, and a load right after it finds the step. The kernel holds the step's folder locked until
// the reply, so this waits for the new tree, not for the refresh's invalidation of old names in
// that folder (which waits for the lock).
void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
               unsigned int flags) {
  metrics::FuseTimer timer(metrics::FuseOp::kOther);
  fuse_reply_err(req, do_rename(impl_of(req), parent, name, newparent, newname, flags));
}

}  // namespace ptcfs::fs
