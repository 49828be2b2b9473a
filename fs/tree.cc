#include "fs/tree.h"

#include <xxhash.h>

#include "ptc/log.h"

namespace ptcfs::fs {
namespace {

class Builder {
 public:
  explicit Builder(std::unordered_map<uint64_t, Node>& nodes) : nodes_(nodes) {
    Node root;
    root.ino = kRootIno;
    root.parent = kRootIno;
    root.is_dir = true;
    nodes_.emplace(kRootIno, std::move(root));
  }

  // The directory at `path` (components joined by '/'), created with its parents.
  ptc::Result<uint64_t> dir(uint64_t parent, const std::string& parent_path, const std::string& rel, int64_t mtime) {
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
        if (!nodes_.at(it->second).is_dir) return ptc::invalid("'" + path + "' is both a file and a directory");
        cur = it->second;
      } else {
        PTC_ASSIGN_OR_RETURN(uint64_t ino, add(cur, name, path, ""));
        Node& n = nodes_.at(ino);
        n.is_dir = true;
        n.mtime = mtime;
        cur = ino;
      }
      pos = slash + 1;
    }
    return cur;
  }

  ptc::Status file(uint64_t dir_ino, const std::string& dir_path, const std::string& rel,
                   std::shared_ptr<const View> view, const std::string& version_tag, int64_t mtime) {
    uint64_t parent = dir_ino;
    std::string parent_path = dir_path;
    std::string name = rel;
    if (const size_t slash = rel.rfind('/'); slash != std::string::npos) {
      PTC_ASSIGN_OR_RETURN(parent, dir(dir_ino, dir_path, rel.substr(0, slash), mtime));
      parent_path = dir_path + "/" + rel.substr(0, slash);
      name = rel.substr(slash + 1);
    }
    if (nodes_.at(parent).children.count(name)) return ptc::invalid("'" + parent_path + "/" + name + "' exists twice");
    PTC_ASSIGN_OR_RETURN(uint64_t ino, add(parent, name, parent_path + "/" + name, version_tag));
    Node& n = nodes_.at(ino);
    n.view = std::move(view);
    n.mtime = mtime;
    return ptc::Status::ok();
  }

 private:
  ptc::Result<uint64_t> add(uint64_t parent, const std::string& name, const std::string& path,
                            const std::string& tag) {
    const std::string key = tag.empty() ? path : path + '\0' + tag;
    uint64_t ino = XXH3_64bits(key.data(), key.size());
    if (ino <= kRootIno) ino += 2;
    if (nodes_.count(ino)) return ptc::internal("inode number collision at '" + path + "'");
    Node n;
    n.ino = ino;
    n.parent = parent;
    nodes_.emplace(ino, std::move(n));
    nodes_.at(parent).children.emplace(name, ino);
    return ino;
  }

  std::unordered_map<uint64_t, Node>& nodes_;
};

ptc::Status add_step(Builder& b, const StepEntry& e) {
  const auto& c = e.content;
  const auto& layout = c->layout();
  const int64_t mtime = c->mtime();
  const std::string tag = "v" + std::to_string(c->version());
  const std::string step_rel = e.job + "/" + e.step;
  PTC_ASSIGN_OR_RETURN(uint64_t step_dir, b.dir(kRootIno, "", step_rel, mtime));
  const std::string sp = "/" + step_rel;
  PTC_RETURN_IF_ERROR(b.file(step_dir, sp, "ptc.json", bytes_view(ptc::ptc_to_json(layout.ptc())), tag, mtime));
  for (const auto& shard : layout.shards()) {
    PTC_ASSIGN_OR_RETURN(auto st, shard_safetensors_view(c, shard));
    PTC_RETURN_IF_ERROR(b.file(step_dir, sp, shard.name() + ".safetensors", std::move(st), tag, mtime));
    PTC_ASSIGN_OR_RETURN(uint64_t sd, b.dir(step_dir, sp, shard.name(), mtime));
    const auto& slices = layout.slices(shard);
    for (size_t i = 0; i < slices.size(); ++i)
      PTC_RETURN_IF_ERROR(b.file(sd, sp + "/" + shard.name(), layout.tensor(slices[i]).name + ".npy",
                                 slice_npy_view(c, shard, i), tag, mtime));
  }
  PTC_ASSIGN_OR_RETURN(uint64_t full, b.dir(step_dir, sp, "full", mtime));
  for (size_t i = 0; i < layout.ptc().tensors.size(); ++i)
    PTC_RETURN_IF_ERROR(
        b.file(full, sp + "/full", layout.ptc().tensors[i].name + ".npy", full_npy_view(c, i), tag, mtime));
  return ptc::Status::ok();
}

}  // namespace

ptc::Result<std::shared_ptr<const Tree>> Tree::build(const std::vector<StepEntry>& steps) {
  auto t = std::make_shared<Tree>();
  Builder b(t->nodes_);
  for (const auto& e : steps) {
    if (auto s = add_step(b, e); !s) {
      // One bad step must not hide the others: it is logged, and what of it was added stays.
      ptc::log::error("not showing {}/{}: {}", e.job, e.step, s.to_string());
    }
  }
  return std::shared_ptr<const Tree>(std::move(t));
}

const Node* Tree::find(uint64_t ino) const {
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? nullptr : &it->second;
}

const Node* Tree::child(const Node& dir, const std::string& name) const {
  auto it = dir.children.find(name);
  return it == dir.children.end() ? nullptr : find(it->second);
}

}  // namespace ptcfs::fs
