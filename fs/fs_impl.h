// Internal to fs/: the state the FUSE operations share (filesystem.cc: the namespace and
// reads; write_ops.cc: the save path), and the helpers both reply with. Not a public header.
#pragma once

#include <chrono>

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <sys/stat.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "fs/filesystem.h"
#include "fs/tree.h"

namespace ptcfs::fs {

// Committed files never change under an inode (a new version gets new inodes), so the
// kernel may cache names, attributes and pages for long. A pending step changes as it is
// written, but only through this mount: the kernel updates the size of a file it writes
// itself, and a folder's name and inode stay when its step commits. So a pending step's
// folders and the attributes of its files are cached for a moment (a save per tensor would
// otherwise look up every folder of a path and ask its attributes once per file), and the
// names of its files not at all: its commit gives them new inodes, which every lookup after
// it must see.
constexpr double kTimeout = 3600.0;
constexpr double kPendingTimeout = 1.0;
// How long a read open of a file whose step is committing waits for the tree that shows it
// committed (do_open); the commit's own refresh takes milliseconds.
constexpr std::chrono::seconds kCommitTreeWait{10};
// Signal used to wake the loop thread when stopping.
constexpr int kWakeSignal = SIGUSR1;

class Filesystem::Impl {
 public:
  MountOptions opts;
  Source source;
  WriteTarget* target = nullptr;  // null: read-only
  fuse_session* se = nullptr;
  std::atomic<bool> loop_running{false};
  pthread_t loop_thread{};
  std::mutex mu;        // guards tree
  std::mutex build_mu;  // one build at a time, so a tree built from older contents never replaces a newer one
  std::shared_ptr<const Tree> tree = std::make_shared<Tree>();

  // What the tree shows: the source's contents and the direct socket's file.
  Contents contents() {
    Contents c = source();
    c.direct_socket = opts.direct_socket;
    c.hf_shard_bytes = opts.hf_shard_bytes;
    return c;
  }

  std::shared_ptr<const Tree> current() {
    std::lock_guard lock(mu);
    return tree;
  }

  // Files open for reading, by inode: a file of a replaced version stays readable while open,
  // and so must its attributes be (fstat of an open file is a GETATTR without the handle once
  // the kernel's cached attributes are dropped, and numpy's mmap asks it for the size).
  void opened(uint64_t ino, const struct stat& st) {
    std::lock_guard lock(open_mu);
    auto& [count, attr] = open_attrs[ino];
    ++count;
    attr = st;
  }
  void closed(uint64_t ino) {
    std::lock_guard lock(open_mu);
    auto it = open_attrs.find(ino);
    if (it != open_attrs.end() && --it->second.first == 0) open_attrs.erase(it);
  }
  bool open_attr(uint64_t ino, struct stat& st) {
    std::lock_guard lock(open_mu);
    auto it = open_attrs.find(ino);
    if (it == open_attrs.end()) return false;
    st = it->second.second;
    return true;
  }
  std::mutex open_mu;  // guards open_attrs
  std::unordered_map<uint64_t, std::pair<int, struct stat>> open_attrs;
  // Rebuilds the tree from the source and swaps it in, without invalidating the kernel's
  // names: for a write operation's own additions and removals, from inside its handler.
  Status rebuild();
  // A create's new file or a mkdir's new folder of a pending step: the current tree plus its
  // node (Tree::with_node), or a build when that tree cannot take it so. Returns the tree now
  // current.
  Result<std::shared_ptr<const Tree>> add_node(Node node, const std::string& name);
};

inline Filesystem::Impl& impl_of(fuse_req_t req) { return *static_cast<Filesystem::Impl*>(fuse_req_userdata(req)); }

// An open file: a view to read and, for a file of a pending step opened for writing, the
// file that takes the writes.
struct OpenFile {
  uint64_t ino;
  int64_t mtime;
  std::shared_ptr<const View> view;
  std::shared_ptr<WriteFile> writer;
  uint64_t writer_id = 0;  // what writer->open_writer() gave this handle
};

inline void fill_attr(uint64_t ino, bool is_dir, uint64_t size, int64_t mtime, bool writable, struct stat& st) {
  std::memset(&st, 0, sizeof st);
  st.st_ino = ino;
  st.st_mode = is_dir ? (S_IFDIR | (writable ? 0755 : 0555)) : (S_IFREG | (writable ? 0644 : 0444));
  st.st_nlink = is_dir ? 2 : 1;
  st.st_size = static_cast<off_t>(is_dir ? 4096 : size);
  st.st_blksize = 1 << 20;
  st.st_blocks = (st.st_size + 511) / 512;
  st.st_mtim.tv_sec = st.st_ctim.tv_sec = st.st_atim.tv_sec = mtime;
}

inline void fill_node_attr(const Node& n, struct stat& st) {
  fill_attr(n.ino, n.is_dir, n.view ? n.view->size() : 0, n.mtime, n.writable, st);
}

inline double attr_timeout_of(const Node& n) { return n.pending ? kPendingTimeout : kTimeout; }
inline double entry_timeout_of(const Node& n) { return !n.pending ? kTimeout : n.is_dir ? kPendingTimeout : 0.0; }

inline void fill_entry(const Node& n, fuse_entry_param& e) {
  std::memset(&e, 0, sizeof e);
  e.ino = n.ino;
  e.attr_timeout = attr_timeout_of(n);
  e.entry_timeout = entry_timeout_of(n);
  fill_node_attr(n, e.attr);
}

}  // namespace ptcfs::fs
