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
//
// A step's nodes (and a dataset's) are built once per version and shared by later trees
// while the version is current, so a commit costs the nodes of what it changed, not of
// every step.
//
// Inode numbers are stable across restarts: a directory's is a hash of its path; a file's
// is a hash of its path and the step's version, so a file whose bytes change gets a new
// inode and the kernel never serves stale cached pages for it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs/content.h"
#include "fs/views.h"

namespace ptcfs::fs {

inline constexpr uint64_t kRootIno = 1;

struct Node {
  uint64_t ino = 0;
  uint64_t parent = 0;
  bool is_dir = false;
  // Directories: new entries may be made in it (the root: jobs; a job: steps; a pending
  // step and its folders: folders and files). Files: part of a pending step.
  bool writable = false;
  bool pending = false;  // part of a pending step: names and sizes change, so the kernel caches none
  int64_t mtime = 0;  // seconds since the epoch
  std::string path;   // directories: relative to the mount root ("" for the root, "job/step/tp0-pp0")
  std::shared_ptr<const View> view;          // files
  std::shared_ptr<WriteFile> file;           // files of a pending step
  std::map<std::string, uint64_t> children;  // directories: name -> ino
};

// The nodes of one version of one step or dataset.
struct SubTree {
  std::shared_ptr<const void> content;  // the StepContent or DatasetContent it shows
  uint64_t root_ino = 0;
  std::unordered_map<uint64_t, Node> nodes;  // the step's (dataset's) folder and everything below
};

// The folder of a job that holds its datasets.
inline constexpr const char* kDataDir = "data";

class Tree {
 public:
  // Builds the tree of the given steps and datasets, reusing the subtrees of `previous`
  // whose version is unchanged.
  static ptc::Result<std::shared_ptr<const Tree>> build(const Contents& contents, const Tree* previous = nullptr);

  const Node* find(uint64_t ino) const;
  const Node* child(const Node& dir, const std::string& name) const;
  size_t size() const { return index_.size(); }
  template <class F>
  void for_each_dir(F&& f) const {
    for (const auto& [_, n] : index_)
      if (n->is_dir) f(*n);
  }

 private:
  std::unordered_map<uint64_t, Node> top_;  // the root, the job folders and their data folders
  // By (job, step) and by (job, "data/" + dataset).
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const SubTree>> subtrees_;
  std::unordered_map<uint64_t, const Node*> index_;  // every node by inode
};

}  // namespace ptcfs::fs
