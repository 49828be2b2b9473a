#include "fs/tree.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <string_view>

#include "fs/dataset_views.h"
#include "fs/dcp_views.h"
#include "fs/hf_views.h"
#include "ptc/base/log.h"

namespace ptcfs::fs {
namespace {

// The inode of `dir`/`name` (or of `dir` alone, `name` empty) with version tag `tag`: the XXH3 of
// the path, then, for a tagged file, a NUL and the tag (hashed in pieces, no string built).
uint64_t ino_of(std::string_view dir, std::string_view name, std::string_view tag) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, dir.data(), dir.size());
  if (!name.empty()) {
    XXH3_64bits_update(&st, "/", 1);
    XXH3_64bits_update(&st, name.data(), name.size());
  }
  if (!tag.empty()) {
    XXH3_64bits_update(&st, "", 1);  // its NUL
    XXH3_64bits_update(&st, tag.data(), tag.size());
  }
  const uint64_t ino = XXH3_64bits_digest(&st);
  return ino <= kDirectIno ? ino + 3 : ino;  // 1 and 2 are the root's and .ptcfs-direct's
}

uint64_t ino_of(const std::string& path, const std::string& tag) { return ino_of(path, {}, tag); }

// Adds directories and files to one node map (the root and job folders, or one step).
class Builder {
 public:
  // `writable`: the folders it makes take new entries (a pending step's).
  explicit Builder(std::unordered_map<uint64_t, Node>& nodes, bool writable = false)
      : nodes_(nodes), writable_(writable) {}

  // The directory at `path` (components joined by '/'), created with its parents.
  Result<uint64_t> dir(uint64_t parent, const std::string& parent_path, const std::string& rel, int64_t mtime) {
    uint64_t cur = parent;
    std::string path = parent_path;
    size_t pos = 0;
    while (pos < rel.size()) {
      size_t slash = rel.find('/', pos);
      if (slash == std::string::npos) slash = rel.size();
      const std::string name = rel.substr(pos, slash - pos);
      path += "/" + name;
      Node& p = nodes_.at(cur);
      auto it = p.children.find(name);
      if (it != p.children.end()) {
        if (!nodes_.at(it->second).is_dir) return invalid("'" + path + "' is both a file and a directory");
        cur = it->second;
      } else {
        PTC_ASSIGN_OR_RETURN(uint64_t ino, add(cur, name, path, ""));
        Node& n = nodes_.at(ino);
        n.is_dir = true;
        n.mtime = mtime;
        n.path = path.substr(1);
        n.writable = writable_;
        cur = ino;
      }
      pos = slash + 1;
    }
    return cur;
  }

  // The new file's inode.
  Result<uint64_t> file(uint64_t dir_ino, const std::string& dir_path, const std::string& rel,
                        std::shared_ptr<const View> view, const std::string& version_tag, int64_t mtime) {
    uint64_t parent = dir_ino;
    std::string parent_path = dir_path;
    std::string name = rel;
    if (const size_t slash = rel.rfind('/'); slash != std::string::npos) {
      PTC_ASSIGN_OR_RETURN(parent, dir(dir_ino, dir_path, rel.substr(0, slash), mtime));
      parent_path = dir_path + "/" + rel.substr(0, slash);
      name = rel.substr(slash + 1);
    }
    // One insertion into the folder's entries, one into the node map (a step of 100,000 tensors
    // makes 200,000 files at every change).
    // The layout gives names in order: a hint at the end makes most insertions constant time.
    Node& dir = nodes_.at(parent);  // stays valid: the map's elements do not move when it grows
    const size_t before = dir.children.size();
    auto entry = dir.children.emplace_hint(dir.children.end(), name, 0);
    if (dir.children.size() == before) return invalid("'" + parent_path + "/" + name + "' exists twice");
    const uint64_t ino = ino_of(parent_path, name, version_tag);
    auto [it, made] = nodes_.try_emplace(ino);
    if (!made) {
      dir.children.erase(entry);
      return internal("inode number collision at '" + parent_path + "/" + name + "'");
    }
    entry->second = ino;
    Node& n = it->second;
    n.ino = ino;
    n.parent = parent;
    n.view = std::move(view);
    n.mtime = mtime;
    return ino;
  }

 private:
  Result<uint64_t> add(uint64_t parent, const std::string& name, const std::string& path, const std::string& tag) {
    const uint64_t ino = ino_of(path, tag);
    if (nodes_.count(ino)) return internal("inode number collision at '" + path + "'");
    Node n;
    n.ino = ino;
    n.parent = parent;
    nodes_.emplace(ino, std::move(n));
    nodes_.at(parent).children.emplace(name, ino);
    return ino;
  }

  std::unordered_map<uint64_t, Node>& nodes_;
  bool writable_;
};

}  // namespace

struct LazyIndex {
  struct Entry {
    const Node* node;
    uint64_t owner;  // the inode of its subtree's folder, and that folder's node
    const Node* owner_node;
  };
  std::shared_mutex mu;  // guards by_ino
  // A multimap: a step's version may be shown by two subtrees at once (a content made again with
  // the same version), whose lazy folders' files have the same inodes; each tree finds its own.
  std::unordered_multimap<uint64_t, Entry> by_ino;
};

// Fills a lazy folder: the folder is `root` (its path "/job/step/..."), in a node map holding it.
using LazyFill = std::function<Status(Builder& b, uint64_t root, const std::string& root_path)>;

struct LazyDir {
  LazyDir(Node folder, LazyFill fill, std::shared_ptr<LazyIndex> index, const Node* owner)
      : root(std::move(folder)), fill_(std::move(fill)), index_(std::move(index)), owner_(owner) {}
  ~LazyDir() {
    if (!made_.load(std::memory_order_acquire)) return;
    std::unique_lock lock(index_->mu);
    for (const auto& [ino, n] : nodes_) {
      auto [b, e] = index_->by_ino.equal_range(ino);
      for (auto it = b; it != e; ++it)
        if (it->second.node == &n) {
          index_->by_ino.erase(it);
          break;
        }
    }
  }

  // The folder with its entries, made on the first call (by any tree that shares it, any thread).
  const Node& made() const {
    std::call_once(once_, [&] {
      nodes_.emplace(root.ino, root);
      Builder b(nodes_);
      if (const Status s = fill_(b, root.ino, "/" + root.path); !s) {
        log::error("not showing the files of {}: {}", root.path, s.to_string());
        nodes_.clear();
        nodes_.emplace(root.ino, root);
      }
      std::unique_lock lock(index_->mu);
      index_->by_ino.reserve(index_->by_ino.size() + nodes_.size());
      for (const auto& [ino, n] : nodes_)
        if (ino != root.ino) index_->by_ino.emplace(ino, LazyIndex::Entry{&n, owner_->ino, owner_});
      made_.store(true, std::memory_order_release);
    });
    return nodes_.at(root.ino);
  }
  bool is_made() const { return made_.load(std::memory_order_acquire); }
  // Every folder made below the root, the root's copy with its entries included. Once made.
  const std::unordered_map<uint64_t, Node>& nodes() const { return nodes_; }

  const Node root;  // the folder's node in its subtree (no entries)

 private:
  LazyFill fill_;
  std::shared_ptr<LazyIndex> index_;
  const Node* owner_;
  mutable std::once_flag once_;
  mutable std::atomic<bool> made_{false};
  mutable std::unordered_map<uint64_t, Node> nodes_;  // written once, under once_
};

SubTree::SubTree() = default;
SubTree::~SubTree() = default;

namespace {

// A pending file: its live size; it is written, not read, until its step commits.
class PendingView final : public View {
 public:
  metrics::ViewKind kind() const override { return metrics::ViewKind::kPending; }
  explicit PendingView(std::shared_ptr<const WriteFile> f) : f_(std::move(f)) {}
  uint64_t size() const override { return f_->size(); }
  Status read(uint64_t, uint64_t, ReadBuffer&) const override {
    return error(Code::kPermissionDenied, "the file belongs to a step still being saved");
  }

 private:
  std::shared_ptr<const WriteFile> f_;
};

// The nodes of one step: its folder (a child of its job's folder) and everything below.
// A subtree's folder at path sp, a child of parent.
std::shared_ptr<SubTree> new_subtree(std::shared_ptr<const void> content, const std::string& sp, uint64_t parent,
                                     int64_t mtime) {
  auto st = std::make_shared<SubTree>();
  st->content = std::move(content);
  Node dir;
  dir.ino = st->root_ino = ino_of(sp, "");
  dir.parent = parent;
  dir.is_dir = true;
  dir.mtime = mtime;
  dir.path = sp.substr(1);
  st->nodes.emplace(dir.ino, std::move(dir));
  return st;
}

// A pending step: inode tags "pending", so that the committed files (tag "v<version>.<origin>")
// get new inodes and the kernel drops what it cached of the pending ones.
Result<std::shared_ptr<const SubTree>> build_pending(const PendingEntry& e, uint64_t job_ino) {
  const std::string sp = "/" + e.job + "/" + e.step;
  auto st = new_subtree(e.stamp, sp, job_ino, e.mtime);
  st->nodes.at(st->root_ino).writable = true;
  Builder b(st->nodes, true);
  for (const auto& d : e.dirs) PTC_RETURN_IF_ERROR(b.dir(st->root_ino, sp, d, e.mtime).status());
  for (const auto& [rel, f] : e.files) {
    PTC_ASSIGN_OR_RETURN(uint64_t ino, b.file(st->root_ino, sp, rel, pending_view(f), "pending", e.mtime));
    Node& n = st->nodes.at(ino);
    n.file = f;
    n.writable = true;
  }
  for (auto& [ino, n] : st->nodes) n.pending = true;
  return std::shared_ptr<const SubTree>(std::move(st));
}

// Makes the folder `rel` of a committed step lazy: its entries are made by `fill` on first use.
Status lazy_dir(SubTree& st, Builder& b, const std::string& sp, const std::string& rel, int64_t mtime,
                const std::shared_ptr<LazyIndex>& index, LazyFill fill) {
  PTC_ASSIGN_OR_RETURN(uint64_t ino, b.dir(st.root_ino, sp, rel, mtime));
  Node& n = st.nodes.at(ino);
  st.lazy.push_back(std::make_unique<LazyDir>(n, std::move(fill), index, &st.nodes.at(st.root_ino)));
  n.lazy = st.lazy.back().get();
  return Status::ok();
}

Result<std::shared_ptr<const SubTree>> build_step(const StepEntry& e, uint64_t job_ino,
                                                  const std::shared_ptr<LazyIndex>& index, uint64_t hf_shard_bytes) {
  const auto& c = e.content;
  const auto& layout = c->layout();
  const int64_t mtime = c->mtime();
  const std::string tag = "v" + std::to_string(c->version()) + (c->origin().empty() ? "" : "." + c->origin());
  const std::string sp = "/" + e.job + "/" + e.step;
  auto st = new_subtree(c, sp, job_ino, mtime);
  st->nodes.reserve(2 * layout.shards().size() + 64);  // and the DCP files
  Builder b(st->nodes);
  const uint64_t step_dir = st->root_ino;
  PTC_RETURN_IF_ERROR(
      b.file(step_dir, sp, "ptc.json", lazy_bytes_view([c] { return ptc::ptc_to_json(c->layout().ptc()); }), tag, mtime)
          .status());
  for (const auto& shard : layout.shards()) {
    PTC_RETURN_IF_ERROR(
        b.file(step_dir, sp, shard.name() + ".safetensors", shard_safetensors_view(c, shard), tag, mtime).status());
    PTC_RETURN_IF_ERROR(lazy_dir(*st, b, sp, shard.name(), mtime, index,
                                 [c, shard, tag, mtime](Builder& lb, uint64_t dir, const std::string& path) {
                                   const auto& l = c->layout();
                                   const auto& slices = l.slices(shard);
                                   for (size_t i = 0; i < slices.size(); ++i)
                                     PTC_RETURN_IF_ERROR(lb.file(dir, path, l.tensor(slices[i]).name + ".npy",
                                                                 slice_npy_view(c, shard, i), tag, mtime)
                                                             .status());
                                   return Status::ok();
                                 }));
  }
  PTC_RETURN_IF_ERROR(
      lazy_dir(*st, b, sp, "full", mtime, index, [c, tag, mtime](Builder& lb, uint64_t dir, const std::string& path) {
        const auto& tensors = c->layout().ptc().tensors;
        for (size_t i = 0; i < tensors.size(); ++i)
          PTC_RETURN_IF_ERROR(lb.file(dir, path, tensors[i].name + ".npy", full_npy_view(c, i), tag, mtime).status());
        return Status::ok();
      }));
  // The DCP view, in dcp/ and at the step's top (stock dcp.load of MNT/<job>/<step> itself): the
  // same views, so a file read through both names is generated once.
  PTC_ASSIGN_OR_RETURN(uint64_t dcp, b.dir(step_dir, sp, kDcpDir, mtime));
  for (auto& [name, view] : dcp_views(c)) {
    PTC_RETURN_IF_ERROR(b.file(dcp, sp + "/" + kDcpDir, name, view, tag, mtime).status());
    PTC_RETURN_IF_ERROR(b.file(step_dir, sp, name, std::move(view), tag, mtime).status());
  }
  // The Hugging Face view, for a step that carries its config.json.
  auto hf = hf_views(c, hf_shard_bytes);
  if (!hf.empty()) {
    PTC_ASSIGN_OR_RETURN(uint64_t hf_dir, b.dir(step_dir, sp, kHfDir, mtime));
    for (auto& [name, view] : hf)
      PTC_RETURN_IF_ERROR(b.file(hf_dir, sp + "/" + kHfDir, name, std::move(view), tag, mtime).status());
  }
  return std::shared_ptr<const SubTree>(std::move(st));
}

Result<std::shared_ptr<const SubTree>> build_dataset(const DatasetEntry& e, uint64_t data_ino) {
  const auto& c = e.content;
  const std::string tag = "v" + std::to_string(c->version());
  const std::string dp = "/" + e.job + "/" + kDataDir + "/" + e.name;
  auto st = new_subtree(c, dp, data_ino, c->mtime());
  Builder b(st->nodes);
  for (auto& [name, view] : dataset_views(c))
    PTC_RETURN_IF_ERROR(b.file(st->root_ino, dp, name, std::move(view), tag, c->mtime()).status());
  return std::shared_ptr<const SubTree>(std::move(st));
}

}  // namespace

std::shared_ptr<const View> pending_view(std::shared_ptr<const WriteFile> f) {
  return std::make_shared<PendingView>(std::move(f));
}

uint64_t Tree::pending_file_ino(const std::string& path) { return ino_of(path, "pending"); }

uint64_t Tree::dir_ino(const std::string& path) { return ino_of(path, ""); }

// Append-only: a node, once added, stays where it is (a deque keeps addresses) until the last
// tree that shares the list goes, so the pointers find() gives stay valid as long as the tree.
// Each index entry records the node's position, which a tree compares with how many nodes it
// shows, so a tree made before an addition does not see it.
struct Tree::Added {
  mutable std::shared_mutex mu;  // guards everything below (readers: find, child)
  std::deque<Node> nodes;
  std::unordered_map<uint64_t, size_t> by_ino;
  std::map<std::pair<uint64_t, std::string>, size_t> by_name;  // (parent, name) -> position
};

std::shared_ptr<const Tree> Tree::with_node(std::shared_ptr<const Tree> base, Node node, const std::string& name) {
  const Node* parent = base->find(node.parent);
  if (!parent || !parent->is_dir || base->find(node.ino) || base->child(*parent, name)) return nullptr;
  auto t = std::make_shared<Tree>();
  auto append = [&](Added& to) {  // locked
    const size_t at = to.nodes.size();
    to.by_ino[node.ino] = at;
    to.by_name[{node.parent, name}] = at;
    to.nodes.push_back(std::move(node));
    t->visible_ = at + 1;
  };
  if (!base->base_) {
    t->base_ = std::move(base);
    t->added_ = std::make_shared<Added>();
    append(*t->added_);
    return t;
  }
  t->base_ = base->base_;
  std::unique_lock lock(base->added_->mu);
  if (base->added_->nodes.size() == base->visible_) {  // `base` is the latest tree of its list: add to it
    append(*base->added_);
    t->added_ = base->added_;
    return t;
  }
  // Another tree was made from `base`'s list after it (the caller did not add to the current
  // tree): a list of its own, with the nodes `base` shows.
  auto own = std::make_shared<Added>();
  for (size_t i = 0; i < base->visible_; ++i) {
    own->nodes.push_back(base->added_->nodes[i]);
    own->by_ino[own->nodes.back().ino] = i;
  }
  for (const auto& [key, i] : base->added_->by_name)
    if (i < base->visible_) own->by_name.emplace(key, i);
  lock.unlock();
  append(*own);
  t->added_ = std::move(own);
  return t;
}

std::vector<std::pair<std::string, uint64_t>> Tree::added_children(uint64_t dir) const {
  std::vector<std::pair<std::string, uint64_t>> out;
  if (!added_) return out;
  std::shared_lock lock(added_->mu);
  for (auto it = added_->by_name.lower_bound({dir, std::string()});
       it != added_->by_name.end() && it->first.first == dir; ++it)
    if (it->second < visible_) out.emplace_back(it->first.second, added_->nodes[it->second].ino);
  return out;
}

Result<std::shared_ptr<const Tree>> Tree::build(const Contents& contents, const Tree* previous) {
  if (previous && previous->base_) previous = previous->base_.get();  // its subtrees are the base's
  auto t = std::make_shared<Tree>();
  t->lazy_index_ = previous && previous->lazy_index_ ? previous->lazy_index_ : std::make_shared<LazyIndex>();
  Node root;
  root.ino = kRootIno;
  root.parent = kRootIno;
  root.is_dir = true;
  root.writable = true;
  t->top_.emplace(kRootIno, std::move(root));
  Builder top(t->top_, true);  // the root and job folders take new jobs and steps
  // Adds the subtree of `key` under `parent` as `name`: the previous tree's when it shows
  // the same content, else a new one. One bad step or dataset must not hide the others.
  auto attach = [&](std::pair<std::string, std::string> key, const std::shared_ptr<const void>& content,
                    uint64_t parent, const std::string& name, const auto& build) {
    std::shared_ptr<const SubTree> st;
    if (previous) {
      auto it = previous->subtrees_.find(key);
      if (it != previous->subtrees_.end() && it->second->content == content) st = it->second;  // unchanged
    }
    if (!st) {
      auto built = build();
      if (!built) {
        log::error("not showing {}/{}: {}", key.first, key.second, built.status().to_string());
        return;
      }
      st = std::move(built).value();
    }
    t->top_.at(parent).children.emplace(name, st->root_ino);
    t->subtrees_.emplace(std::move(key), std::move(st));
  };
  // MNT/<job>/data is the folder of the job's datasets: a step of that name, committed or
  // pending, would stand where it goes (the daemon refuses the name; this keeps the tree sound).
  auto reserved = [](const std::string& job, const std::string& step) {
    if (step != kDataDir) return false;
    log::error("not showing {}/{}: '{}' is the folder of the job's datasets", job, step, kDataDir);
    return true;
  };
  for (const auto& e : contents.steps) {
    if (reserved(e.job, e.step)) continue;
    PTC_ASSIGN_OR_RETURN(uint64_t job_ino, top.dir(kRootIno, "", e.job, e.content->mtime()));
    attach({e.job, e.step}, e.content, job_ino, e.step,
           [&] { return build_step(e, job_ino, t->lazy_index_, contents.hf_shard_bytes); });
  }
  for (const auto& job : contents.jobs) PTC_RETURN_IF_ERROR(top.dir(kRootIno, "", job, 0).status());
  for (const auto& e : contents.pending) {
    if (reserved(e.job, e.step)) continue;
    PTC_ASSIGN_OR_RETURN(uint64_t job_ino, top.dir(kRootIno, "", e.job, e.mtime));
    attach({e.job, e.step}, e.stamp, job_ino, e.step, [&] { return build_pending(e, job_ino); });
  }
  for (const auto& e : contents.datasets) {
    PTC_ASSIGN_OR_RETURN(uint64_t data_ino, top.dir(kRootIno, "", e.job + "/" + kDataDir, e.content->mtime()));
    attach({e.job, std::string(kDataDir) + "/" + e.name}, e.content, data_ino, e.name,
           [&] { return build_dataset(e, data_ino); });
  }
  if (!contents.direct_socket.empty()) {
    Node n;
    n.ino = kDirectIno;
    n.parent = kRootIno;
    n.path = kDirectName;
    n.view = bytes_view(contents.direct_socket);
    t->top_.emplace(kDirectIno, std::move(n));  // in no folder's children: listed nowhere
  }
  size_t count = t->top_.size();
  for (const auto& [key, st] : t->subtrees_) count += st->nodes.size();
  t->index_.reserve(count);  // one allocation of its buckets, not a rehash at every doubling
  for (const auto& [ino, n] : t->top_) t->index_.emplace(ino, &n);
  for (const auto& [key, st] : t->subtrees_)
    for (const auto& [ino, n] : st->nodes)
      if (!t->index_.emplace(ino, &n).second)
        log::error("inode number collision in {}/{}: a file is hidden", key.first, key.second);
  return std::shared_ptr<const Tree>(std::move(t));
}

const Node* Tree::find(uint64_t ino) const {
  if (base_) {
    {
      std::shared_lock lock(added_->mu);
      auto e = added_->by_ino.find(ino);
      if (e != added_->by_ino.end() && e->second < visible_) return &added_->nodes[e->second];
    }
    return base_->find(ino);
  }
  auto it = index_.find(ino);
  if (it != index_.end()) return it->second;
  if (!lazy_index_) return nullptr;  // a tree not built (the empty one a mount starts with)
  // A file or folder of a made lazy folder, of a subtree this tree shows.
  std::shared_lock lock(lazy_index_->mu);
  auto [b, e] = lazy_index_->by_ino.equal_range(ino);
  for (auto l = b; l != e; ++l) {
    auto owner = index_.find(l->second.owner);
    if (owner != index_.end() && owner->second == l->second.owner_node) return l->second.node;
  }
  return nullptr;
}

const std::map<std::string, uint64_t>& Tree::children(const Node& dir) const {
  return dir.lazy ? dir.lazy->made().children : dir.children;
}

const std::map<std::string, uint64_t>* Tree::made_children(uint64_t ino) const {
  const Node* n = find(ino);
  if (!n || !n->is_dir) return nullptr;
  if (!n->lazy) return &n->children;
  return n->lazy->is_made() ? &n->lazy->made().children : nullptr;
}

void Tree::for_each_made_dir(const std::function<void(uint64_t, const std::map<std::string, uint64_t>&)>& f) const {
  const Tree& t = base_ ? *base_ : *this;
  for (const auto& [ino, n] : t.index_)
    if (n->is_dir && !n->lazy) f(ino, n->children);
  for (const auto& [key, st] : t.subtrees_)
    for (const auto& lazy : st->lazy)
      if (lazy->is_made())
        for (const auto& [ino, n] : lazy->nodes())
          if (n.is_dir) f(ino, n.children);
}

const Node* Tree::child(const Node& dir, const std::string& name) const {
  if (dir.ino == kRootIno && name == kDirectName) return find(kDirectIno);
  const auto& entries = children(dir);
  auto it = entries.find(name);
  if (it != entries.end()) {
    if (dir.lazy) return &dir.lazy->nodes().at(it->second);
    return find(it->second);
  }
  if (!base_) return nullptr;
  std::shared_lock lock(added_->mu);
  auto e = added_->by_name.find({dir.ino, name});
  return e == added_->by_name.end() || e->second >= visible_ ? nullptr : &added_->nodes[e->second];
}

}  // namespace ptcfs::fs
