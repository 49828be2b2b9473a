// The namespace: an immutable tree of directories and file views built from the current
// steps. A new tree is built when the steps change and swapped in whole; open files keep
// their view, so they are unaffected.
//
//   /<job>/<step>/ptc.json
//   /<job>/<step>/tp{t}-pp{p}.safetensors
//   /<job>/<step>/tp{t}-pp{p}/<tensor>.npy     ('/' in a tensor name makes subfolders)
//   /<job>/<step>/full/<tensor>.npy
//   /<job>/data/<dataset>/...                 (fs/dataset_views.h)
//   /<job>/<step>/...                         a pending step: the folders and files written so far
//   /.ptcfs-direct                            the direct socket's path (not listed)
//
// A step's nodes (and a dataset's) are built once per version and shared by later trees
// while the version is current, so a commit costs the nodes of what it changed, not of
// every step. A committed step's shard folders and full/ (a file per tensor: 300,000 files for
// 100,000 tensors at tp=2) are lazy: their entries are made when the folder is first looked in
// or listed, so a change costs the files a reader uses, not every tensor's.
//
// Inode numbers are stable across restarts: a directory's is a hash of its path; a file's
// is a hash of its path and the step's version, so a file whose bytes change gets a new
// inode and the kernel never serves stale cached pages for it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs/content.h"
#include "fs/views.h"

namespace ptcfs::fs {

inline constexpr uint64_t kRootIno = 1;
// MNT/.ptcfs-direct: a file that holds the direct socket's path (daemon/direct/direct_server.h),
// found by its name and listed nowhere, so that a client finds the socket from any path of the
// mount without any listing showing it.
inline constexpr const char* kDirectName = ".ptcfs-direct";
inline constexpr uint64_t kDirectIno = 2;

struct LazyDir;  // a folder whose entries are made on first use (tree.cc)

struct Node {
  uint64_t ino = 0;
  uint64_t parent = 0;
  bool is_dir = false;
  // Directories: new entries may be made in it (the root: jobs; a job: steps; a pending
  // step and its folders: folders and files). Files: part of a pending step.
  bool writable = false;
  bool pending = false;              // of a pending step: it changes (fs_impl.h: what the kernel caches)
  int64_t mtime = 0;                 // seconds since the epoch
  std::string path;                  // directories: relative to the mount root ("" for the root, "job/step/tp0-pp0")
  std::shared_ptr<const View> view;  // files
  std::shared_ptr<WriteFile> file;   // files of a pending step
  std::map<std::string, uint64_t> children;  // directories: name -> ino (a lazy one's: Tree::children)
  const LazyDir* lazy = nullptr;             // a lazy folder: its SubTree owns what this points to
};

// Where the nodes of made lazy folders are found by inode: one per chain of trees built each
// from the last, shared by their subtrees' lazy folders (tree.cc).
struct LazyIndex;

// The nodes of one version of one step or dataset.
struct SubTree {
  SubTree();
  ~SubTree();
  std::shared_ptr<const void> content;  // the StepContent or DatasetContent it shows
  uint64_t root_ino = 0;
  std::unordered_map<uint64_t, Node> nodes;  // the step's (dataset's) folder and everything below
  // The lazy folders among `nodes` (declared after them: gone from the index before they go).
  std::vector<std::unique_ptr<LazyDir>> lazy;
};

// The folder of a job that holds its datasets.
inline constexpr const char* kDataDir = "data";

// The view of a pending file: its live size; it is written, not read, until its step commits.
std::shared_ptr<const View> pending_view(std::shared_ptr<const WriteFile> f);

class Tree {
 public:
  // Builds the tree of the given steps and datasets, reusing the subtrees of `previous`
  // whose version is unchanged.
  static Result<std::shared_ptr<const Tree>> build(const Contents& contents, const Tree* previous = nullptr);

  // A tree that is `base` plus one new node of a pending step (a file a create made, or a folder
  // of a mkdir; `node` holds it, its parent folder is in `base`): what a create shows at once,
  // without building the whole tree again (a step saved per tensor creates 100,000s of files).
  // The nodes added this way sit in an append-only list shared by every tree made from the
  // same built tree, each tree seeing the ones added up to it, so that an addition costs
  // O(log nodes) and not a copy of the earlier ones; the next build folds them in. Null when
  // `base` (or an earlier addition to it) already has the inode: the caller builds instead.
  static std::shared_ptr<const Tree> with_node(std::shared_ptr<const Tree> base, Node node, const std::string& name);
  // Nodes added by with_node since the last build, seen by this tree.
  size_t added() const { return visible_; }
  // The inode number a pending file at `path` ("/job/step/rel") has in every tree.
  static uint64_t pending_file_ino(const std::string& path);
  // The inode number a folder at `path` ("/job/step/rel") has in every tree.
  static uint64_t dir_ino(const std::string& path);

  const Node* find(uint64_t ino) const;
  const Node* child(const Node& dir, const std::string& name) const;
  // The entries of `dir` (a lazy folder's are made here, once, for every tree that shares it).
  const std::map<std::string, uint64_t>& children(const Node& dir) const;
  // The entries of the folder `ino` when they are made (null: no such folder, or a lazy folder
  // never looked in, in which the kernel can have cached no name).
  const std::map<std::string, uint64_t>* made_children(uint64_t ino) const;
  // f(folder's inode, its entries) for every folder whose entries are made.
  void for_each_made_dir(const std::function<void(uint64_t, const std::map<std::string, uint64_t>&)>& f) const;
  // The names in `dir` added by with_node (name -> inode), in name order.
  std::vector<std::pair<std::string, uint64_t>> added_children(uint64_t dir) const;

 private:
  struct Added;                             // the nodes added to base_ by with_node (tree.cc)
  std::shared_ptr<const Tree> base_;        // with_node: the tree built last
  std::shared_ptr<Added> added_;            // with_node: shared by the trees made from base_
  size_t visible_ = 0;                      // with_node: how many of added_'s nodes this tree shows
  std::unordered_map<uint64_t, Node> top_;  // the root, the job folders and their data folders
  // By (job, step) and by (job, "data/" + dataset).
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const SubTree>> subtrees_;
  std::unordered_map<uint64_t, const Node*> index_;  // every node by inode, but those of lazy folders
  std::shared_ptr<LazyIndex> lazy_index_;            // those of lazy folders, once made
};

}  // namespace ptcfs::fs
