#include "fs/tree.h"

#include <xxhash.h>

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fs/content.h"
#include "tests/fs/fake_dataset.h"
#include "tests/fs/fake_step.h"

using namespace ptcfs;
using namespace ptcfs::fs;
using namespace ptcfs::fs::testing;

namespace {

// A file of a pending step that has `size` bytes so far; the tree only asks its size.
class FakeWriteFile final : public WriteFile {
 public:
  explicit FakeWriteFile(uint64_t size) : size_(size) {}
  uint64_t size() const override { return size_; }
  Result<uint64_t> open_writer() override { return uint64_t{1}; }
  Status write(uint64_t, uint64_t, const void*, size_t) override { return Status::ok(); }
  Status truncate(uint64_t, uint64_t) override { return Status::ok(); }
  Status flush(uint64_t) override { return Status::ok(); }
  void release(uint64_t) override {}

 private:
  uint64_t size_;
};

// Two committed steps of job gpt, its dataset "web", and a job made by mkdir with no step yet.
Contents two_steps_and_a_dataset(std::shared_ptr<const StepContent> s100, std::shared_ptr<const StepContent> s200,
                                 std::shared_ptr<const DatasetContent> web) {
  Contents c;
  c.steps.push_back({"gpt", "100", std::move(s100)});
  c.steps.push_back({"gpt", "200", std::move(s200)});
  c.datasets.push_back({"gpt", "web", std::move(web)});
  c.jobs.push_back("empty");
  return c;
}

std::shared_ptr<const Tree> build(const Contents& c, const Tree* previous = nullptr) {
  auto t = Tree::build(c, previous);
  INFO(t.status().to_string());
  REQUIRE(t.is_ok());
  return std::move(t).value();
}

// Every path below the root ("job/step/...", folders ending in '/'), walked through the
// folders' entries (what a listing shows), with its inode number.
std::map<std::string, uint64_t> walk(const Tree& t) {
  std::map<std::string, uint64_t> out;
  std::function<void(const Node&, const std::string&)> rec = [&](const Node& dir, const std::string& prefix) {
    for (const auto& [name, ino] : t.children(dir)) {
      const Node* n = t.find(ino);
      REQUIRE(n != nullptr);
      CHECK(n->parent == dir.ino);
      if (n->is_dir) {
        out[prefix + name + "/"] = ino;
        rec(*n, prefix + name + "/");
      } else {
        out[prefix + name] = ino;
      }
    }
  };
  const Node* root = t.find(kRootIno);
  REQUIRE(root != nullptr);
  rec(*root, "");
  return out;
}

// The node at a path ("gpt/100/full"), found name by name through Tree::child.
const Node* lookup(const Tree& t, const std::string& path) {
  const Node* n = t.find(kRootIno);
  size_t pos = 0;
  while (n && pos < path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    n = t.child(*n, path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return n;
}

uint64_t xxh3(const std::string& s) { return XXH3_64bits(s.data(), s.size()); }
// A file's key: its path, a NUL, and the tag of its version ("v<version>", or "pending").
std::string tagged(const std::string& path, const std::string& tag) { return path + '\0' + tag; }

// The files and folders of one committed step of the fake layout (fake_step.h).
std::vector<std::string> step_paths(const std::string& sp) {
  return {sp + "/",
          sp + "/.metadata",  // the DCP view, at the top too (stock dcp.load of the step folder)
          sp + "/tp0-pp0.distcp",
          sp + "/tp0-pp1.distcp",
          sp + "/tp1-pp0.distcp",
          sp + "/tp1-pp1.distcp",
          sp + "/dcp/",
          sp + "/dcp/.metadata",
          sp + "/dcp/tp0-pp0.distcp",
          sp + "/dcp/tp0-pp1.distcp",
          sp + "/dcp/tp1-pp0.distcp",
          sp + "/dcp/tp1-pp1.distcp",
          sp + "/full/",
          sp + "/full/emb.weight.npy",
          sp + "/full/final_norm.npy",
          sp + "/full/head/",
          sp + "/full/head/bias.npy",
          sp + "/full/layers.0.qkv.npy",
          sp + "/full/layers.1.dense.npy",
          sp + "/ptc.json",
          sp + "/tp0-pp0.safetensors",
          sp + "/tp0-pp0/",
          sp + "/tp0-pp0/emb.weight.npy",
          sp + "/tp0-pp0/layers.0.qkv.npy",
          sp + "/tp0-pp1.safetensors",
          sp + "/tp0-pp1/",
          sp + "/tp0-pp1/final_norm.npy",
          sp + "/tp0-pp1/head/",
          sp + "/tp0-pp1/head/bias.npy",
          sp + "/tp0-pp1/layers.1.dense.npy",
          sp + "/tp1-pp0.safetensors",
          sp + "/tp1-pp0/",
          sp + "/tp1-pp0/emb.weight.npy",
          sp + "/tp1-pp0/layers.0.qkv.npy",
          sp + "/tp1-pp1.safetensors",
          sp + "/tp1-pp1/",
          sp + "/tp1-pp1/final_norm.npy",
          sp + "/tp1-pp1/head/",
          sp + "/tp1-pp1/head/bias.npy",
          sp + "/tp1-pp1/layers.1.dense.npy"};
}

std::vector<std::string> keys(const std::map<std::string, uint64_t>& m) {
  std::vector<std::string> out;
  for (const auto& [k, _] : m) out.push_back(k);
  return out;
}

}  // namespace

TEST_CASE("the namespace shows every step's files and folders and the job's datasets under data/") {
  auto t = build(two_steps_and_a_dataset(std::make_shared<FakeStep>(1), std::make_shared<FakeStep>(2), small_jsonl(5)));
  std::vector<std::string> expected = {"empty/", "gpt/"};
  for (const auto& p : step_paths("gpt/100")) expected.push_back(p);
  for (const auto& p : step_paths("gpt/200")) expected.push_back(p);
  for (const auto& p :
       {"gpt/data/", "gpt/data/web/", "gpt/data/web/dp0.jsonl", "gpt/data/web/dp1.jsonl", "gpt/data/web/state.json"})
    expected.push_back(p);
  std::sort(expected.begin(), expected.end());
  CHECK(keys(walk(*t)) == expected);

  const Node* step = lookup(*t, "gpt/100");
  REQUIRE(step != nullptr);
  CHECK(step->is_dir);
  CHECK(step->path == "gpt/100");
  CHECK(step->mtime == 1700000000);
  CHECK_FALSE(step->writable);
  CHECK_FALSE(step->pending);
  const Node* file = lookup(*t, "gpt/100/tp0-pp1/head/bias.npy");
  REQUIRE(file != nullptr);
  CHECK_FALSE(file->is_dir);
  CHECK(file->view->size() == 128 + 4);
  CHECK(file->view->version() == 1);
  CHECK(lookup(*t, "gpt/200/full/layers.0.qkv.npy")->view->version() == 2);
  CHECK(lookup(*t, "gpt/100/ptc.json")->view->size() == ptc::ptc_to_json(test_layout().ptc()).size());
  CHECK(lookup(*t, "gpt/data/web/state.json")->view->version() == 0);
  CHECK(lookup(*t, "gpt/data/web/dp0.jsonl")->view->version() == 5);
  CHECK(lookup(*t, "gpt/data/web/dp0.jsonl")->view->size() == 16);  // 2 of the 4 records of 8 bytes
  CHECK(lookup(*t, "gpt/100/nothing") == nullptr);
  CHECK(lookup(*t, "gpt/100/dcp/.metadata")->view->version() == 1);
  CHECK(lookup(*t, "gpt/200/dcp/tp1-pp1.distcp")->view->version() == 2);
  // One view under two names: dcp/ and the step's top.
  CHECK(lookup(*t, "gpt/200/tp1-pp1.distcp")->view == lookup(*t, "gpt/200/dcp/tp1-pp1.distcp")->view);
  CHECK(lookup(*t, "gpt/200/.metadata")->view == lookup(*t, "gpt/200/dcp/.metadata")->view);

  // Folders: the root takes new jobs and a job new steps; a committed step takes nothing.
  CHECK(t->find(kRootIno)->writable);
  CHECK(lookup(*t, "gpt")->writable);
  CHECK(lookup(*t, "empty")->children.empty());
  // The step folders' shard folders and full/ were made by the walk above (lazy: tree.h).
  size_t dirs = 0;
  t->for_each_made_dir([&](uint64_t, const std::map<std::string, uint64_t>&) { ++dirs; });
  CHECK(dirs == 1 + 2 + 2 * 10 + 2);  // root, 2 jobs, 10 folders per step, data/ and web/
}

TEST_CASE("a committed step's shard folders and full/ are made when first looked in, once for every tree") {
  auto s1 = std::make_shared<FakeStep>(1);
  Contents c = two_steps_and_a_dataset(s1, std::make_shared<FakeStep>(2), small_jsonl(5));
  auto t = build(c);
  auto made = [](const Tree& tr) {
    std::vector<uint64_t> out;
    tr.for_each_made_dir([&](uint64_t ino, const std::map<std::string, uint64_t>&) { out.push_back(ino); });
    return out.size();
  };
  // root, 2 jobs, data/ and web/, and per step its folder and dcp/: no shard folder, no full/.
  CHECK(made(*t) == 1 + 2 + 2 + 2 * 2);
  const Node* shard = lookup(*t, "gpt/100/tp0-pp1");
  REQUIRE(shard != nullptr);
  CHECK(shard->is_dir);
  CHECK(shard->children.empty());  // not made: what the kernel may have cached of it is nothing
  CHECK(t->made_children(shard->ino) == nullptr);
  // Looking in it makes it, with its subfolder.
  const Node* bias = lookup(*t, "gpt/100/tp0-pp1/head/bias.npy");
  REQUIRE(bias != nullptr);
  CHECK(t->find(bias->ino) == bias);
  CHECK(t->find(bias->parent)->path == "gpt/100/tp0-pp1/head");
  CHECK(bias->view->size() == 128 + 4);
  REQUIRE(t->made_children(shard->ino) != nullptr);
  CHECK(keys(*t->made_children(shard->ino)) ==
        std::vector<std::string>{"final_norm.npy", "head", "layers.1.dense.npy"});
  CHECK(made(*t) == 1 + 2 + 2 + 2 * 2 + 2);  // and tp0-pp1/, tp0-pp1/head/

  // A tree built next shares the step's subtree: what was made is made there too, with the same nodes.
  Contents next = c;
  next.steps[1].content = std::make_shared<FakeStep>(3);  // gpt/200 changes
  auto t2 = build(next, t.get());
  CHECK(t2->made_children(shard->ino) != nullptr);
  CHECK(t2->find(bias->ino) == bias);
  CHECK(lookup(*t2, "gpt/100/tp0-pp1/head/bias.npy") == bias);
  // gpt/200's new version: nothing made yet, and the old version's made files are not its.
  const Node* old200 = lookup(*t, "gpt/200/full/head/bias.npy");
  REQUIRE(old200 != nullptr);
  CHECK(t2->find(old200->ino) == nullptr);
  CHECK(t->find(old200->ino) == old200);
  CHECK(t2->made_children(lookup(*t2, "gpt/200/full")->ino) == nullptr);
  const Node* new200 = lookup(*t2, "gpt/200/full/head/bias.npy");
  REQUIRE(new200 != nullptr);
  CHECK(new200->ino != old200->ino);
  CHECK(new200->view->version() == 3);
  CHECK(t->find(new200->ino) == nullptr);  // the first tree does not show the new version

  // The same version shown by two subtrees at once (its content made again): each tree finds its own.
  Contents again = c;
  again.steps[0].content = std::make_shared<FakeStep>(1);
  auto t3 = build(again, t.get());
  const Node* bias3 = lookup(*t3, "gpt/100/tp0-pp1/head/bias.npy");
  REQUIRE(bias3 != nullptr);
  CHECK(bias3->ino == bias->ino);
  CHECK(bias3 != bias);
  CHECK(t3->find(bias->ino) == bias3);
  CHECK(t->find(bias->ino) == bias);
  t.reset();
  t2.reset();  // gpt/100's first subtree goes with its trees; the second stays found
  CHECK(t3->find(bias3->ino) == bias3);

  // The empty tree a mount starts with (never built) finds nothing, and a tree built after it shows
  // lazy folders as any other.
  auto empty = std::make_shared<const Tree>();
  CHECK(empty->find(bias3->ino) == nullptr);
  auto after_empty = build(c, empty.get());
  CHECK(lookup(*after_empty, "gpt/100/tp0-pp1/head/bias.npy") != nullptr);
}

TEST_CASE(".ptcfs-direct is found by name at the root and listed nowhere") {
  Contents c = two_steps_and_a_dataset(std::make_shared<FakeStep>(1), std::make_shared<FakeStep>(2), small_jsonl(5));
  SECTION("with a direct socket") {
    c.direct_socket = "/run/ptcfs/direct.sock";
    auto t = build(c);
    const Node* d = t->child(*t->find(kRootIno), kDirectName);
    REQUIRE(d != nullptr);
    CHECK(d->ino == kDirectIno);
    CHECK(d->parent == kRootIno);
    CHECK_FALSE(d->is_dir);
    ReadBuffer b;
    REQUIRE(d->view->read(0, d->view->size(), b).is_ok());
    std::string text(b.size(), '?');
    REQUIRE(b.copy_to(reinterpret_cast<std::byte*>(text.data())).is_ok());
    CHECK(text == "/run/ptcfs/direct.sock");
    CHECK(walk(*t).count(kDirectName) == 0);
    CHECK(t->child(*lookup(*t, "gpt"), kDirectName) == nullptr);  // only at the root
  }
  SECTION("without one there is no such file") {
    auto t = build(c);
    CHECK(t->child(*t->find(kRootIno), kDirectName) == nullptr);
    CHECK(t->find(kDirectIno) == nullptr);
  }
}

TEST_CASE("a step named like the datasets' folder is not shown, and hides nothing else") {
  Contents c = two_steps_and_a_dataset(std::make_shared<FakeStep>(1), std::make_shared<FakeStep>(2), small_jsonl(5));
  c.steps.push_back({"gpt", kDataDir, std::make_shared<FakeStep>(3)});
  auto t = build(c);
  CHECK(lookup(*t, "gpt/data/ptc.json") == nullptr);
  CHECK(lookup(*t, "gpt/data/web/state.json") != nullptr);
  CHECK(lookup(*t, "gpt/100/ptc.json") != nullptr);
}

TEST_CASE("inode numbers are hashes of the path, and of the step's version for files") {
  auto t = build(two_steps_and_a_dataset(std::make_shared<FakeStep>(1), std::make_shared<FakeStep>(2), small_jsonl(5)));
  CHECK(lookup(*t, "gpt")->ino == xxh3("/gpt"));
  CHECK(lookup(*t, "gpt/100")->ino == xxh3("/gpt/100"));
  CHECK(lookup(*t, "gpt/100/tp0-pp1/head")->ino == xxh3("/gpt/100/tp0-pp1/head"));
  CHECK(lookup(*t, "gpt/100/ptc.json")->ino == xxh3(tagged("/gpt/100/ptc.json", "v1")));
  CHECK(lookup(*t, "gpt/200/full/head/bias.npy")->ino == xxh3(tagged("/gpt/200/full/head/bias.npy", "v2")));
  CHECK(lookup(*t, "gpt/data/web/state.json")->ino == xxh3(tagged("/gpt/data/web/state.json", "v5")));
  CHECK(Tree::pending_file_ino("/gpt/300/ptc.json") == xxh3(tagged("/gpt/300/ptc.json", "pending")));
}

TEST_CASE("a version of the same number and another origin gives a step's files new inode numbers") {
  // The step removed and saved again under its name: version 1 again, other bytes.
  auto web = small_jsonl(5);
  auto s100 = std::make_shared<FakeStep>(1);
  auto first = walk(*build(two_steps_and_a_dataset(s100, std::make_shared<FakeStep>(1, 1700000000, "", "t1"), web)));
  auto again = walk(*build(two_steps_and_a_dataset(s100, std::make_shared<FakeStep>(1, 1700000000, "", "t2"), web)));
  REQUIRE(keys(first) == keys(again));
  size_t changed = 0;
  for (const auto& [path, ino] : first) {
    INFO(path);
    const bool new_file = path.rfind("gpt/200/", 0) == 0 && path.back() != '/';
    CHECK((again.at(path) != ino) == new_file);
    changed += new_file;
  }
  CHECK(changed == 30);
  auto t = build(two_steps_and_a_dataset(s100, std::make_shared<FakeStep>(1, 1700000000, "", "t2"), web));
  CHECK(lookup(*t, "gpt/200/ptc.json")->ino == xxh3(tagged("/gpt/200/ptc.json", "v1.t2")));
}

TEST_CASE("two builds of the same contents give every path the same inode number") {
  auto a = walk(
      *build(two_steps_and_a_dataset(std::make_shared<FakeStep>(1), std::make_shared<FakeStep>(2), small_jsonl(5))));
  auto b = walk(
      *build(two_steps_and_a_dataset(std::make_shared<FakeStep>(1), std::make_shared<FakeStep>(2), small_jsonl(5))));
  CHECK(a == b);
  CHECK(a.size() == 2 + 2 * 40 + 5);
}

TEST_CASE("a new version of a step gives its files new inode numbers and keeps its folders' and the others'") {
  auto s100 = std::make_shared<FakeStep>(1);
  auto web = small_jsonl(5);
  auto before = walk(*build(two_steps_and_a_dataset(s100, std::make_shared<FakeStep>(2), web)));
  auto after = walk(*build(two_steps_and_a_dataset(s100, std::make_shared<FakeStep>(3), web)));
  REQUIRE(keys(before) == keys(after));
  size_t changed = 0;
  for (const auto& [path, ino] : before) {
    INFO(path);
    const bool new_file = path.rfind("gpt/200/", 0) == 0 && path.back() != '/';
    CHECK((after.at(path) != ino) == new_file);
    changed += new_file;
  }
  CHECK(changed == 30);  // ptc.json, 4 safetensors, 10 slice npy, 5 full npy, the DCP view's 5 files twice
}

TEST_CASE("a build reuses the nodes of every step and dataset whose version is unchanged") {
  auto s100 = std::make_shared<FakeStep>(1);
  auto web = small_jsonl(5);
  auto first = build(two_steps_and_a_dataset(s100, std::make_shared<FakeStep>(2), web));
  auto second = build(two_steps_and_a_dataset(s100, std::make_shared<FakeStep>(3), web), first.get());
  // The same Node objects: the unchanged subtrees are shared, not rebuilt.
  for (const char* path : {"gpt/100", "gpt/100/tp0-pp1/head/bias.npy", "gpt/data/web", "gpt/data/web/dp1.jsonl"}) {
    INFO(path);
    CHECK(lookup(*second, path) == lookup(*first, path));
  }
  // The changed step is built again: its folder keeps its inode but is a new node.
  CHECK(lookup(*second, "gpt/200") != lookup(*first, "gpt/200"));
  CHECK(lookup(*second, "gpt/200")->ino == lookup(*first, "gpt/200")->ino);
  CHECK(lookup(*second, "gpt/200/ptc.json")->view->version() == 0);
  CHECK(lookup(*second, "gpt/200/tp0-pp0.safetensors")->view->version() == 3);
  // Without a previous tree nothing is shared.
  auto fresh = build(two_steps_and_a_dataset(s100, std::make_shared<FakeStep>(3), web));
  CHECK(lookup(*fresh, "gpt/100") != lookup(*first, "gpt/100"));
}

TEST_CASE("a file added with with_node is visible at once and folded into the next build") {
  auto ptc_json = std::make_shared<FakeWriteFile>(10);
  PendingEntry p{"gpt", "300", 1700000200, std::make_shared<int>(1), {"tp0-pp0"}, {{"ptc.json", ptc_json}}};
  Contents c;
  c.steps.push_back({"gpt", "100", std::make_shared<FakeStep>(1)});
  c.pending.push_back(p);
  auto base = build(c);

  const Node* step = lookup(*base, "gpt/300");
  REQUIRE(step != nullptr);
  CHECK(step->writable);
  CHECK(step->pending);
  const Node* pj = lookup(*base, "gpt/300/ptc.json");
  REQUIRE(pj != nullptr);
  CHECK(pj->ino == Tree::pending_file_ino("/gpt/300/ptc.json"));
  CHECK(pj->pending);
  CHECK(pj->writable);
  CHECK(pj->file == ptc_json);
  CHECK(pj->view->size() == 10);
  CHECK(lookup(*base, "gpt/300/tp0-pp0")->pending);

  // What a create does (fs/write_ops.cc): the file's node, added to the current tree.
  auto shard = std::make_shared<FakeWriteFile>(64);
  auto node_of = [&](const std::string& rel, uint64_t parent, std::shared_ptr<WriteFile> f) {
    Node n;
    n.ino = Tree::pending_file_ino("/gpt/300/" + rel);
    n.parent = parent;
    n.mtime = 1700000200;
    n.view = pending_view(f);
    n.file = std::move(f);
    n.writable = n.pending = true;
    return n;
  };
  const uint64_t step_ino = step->ino;
  const uint64_t shard_dir = lookup(*base, "gpt/300/tp0-pp0")->ino;
  auto one = Tree::with_node(base, node_of("tp0-pp0.safetensors", step_ino, shard), "tp0-pp0.safetensors");
  CHECK(one->added() == 1);
  const Node* added = lookup(*one, "gpt/300/tp0-pp0.safetensors");
  REQUIRE(added != nullptr);
  CHECK(added->ino == Tree::pending_file_ino("/gpt/300/tp0-pp0.safetensors"));
  CHECK(added->view->size() == 64);
  CHECK(one->find(added->ino) == added);
  CHECK(one->added_children(step_ino) ==
        std::vector<std::pair<std::string, uint64_t>>{{"tp0-pp0.safetensors", added->ino}});
  CHECK(lookup(*base, "gpt/300/tp0-pp0.safetensors") == nullptr);  // the base is unchanged
  CHECK(lookup(*one, "gpt/100") == lookup(*base, "gpt/100"));      // and shared

  auto npy = std::make_shared<FakeWriteFile>(0);
  auto two = Tree::with_node(one, node_of("tp0-pp0/w.npy", shard_dir, npy), "w.npy");
  CHECK(two->added() == 2);
  CHECK(lookup(*two, "gpt/300/tp0-pp0.safetensors") != nullptr);
  CHECK(lookup(*two, "gpt/300/tp0-pp0/w.npy")->ino == Tree::pending_file_ino("/gpt/300/tp0-pp0/w.npy"));
  CHECK(one->added() == 1);  // the tree it was added to is unchanged
  CHECK(lookup(*one, "gpt/300/tp0-pp0/w.npy") == nullptr);

  // The next build sees the files in the contents: they are folded in, with the same inodes.
  p.stamp = std::make_shared<int>(2);
  p.files.push_back({"tp0-pp0.safetensors", shard});
  p.files.push_back({"tp0-pp0/w.npy", npy});
  c.pending = {p};
  auto rebuilt = build(c, two.get());
  CHECK(rebuilt->added() == 0);
  CHECK(rebuilt->added_children(step_ino).empty());
  CHECK(lookup(*rebuilt, "gpt/300/tp0-pp0.safetensors")->ino == Tree::pending_file_ino("/gpt/300/tp0-pp0.safetensors"));
  CHECK(lookup(*rebuilt, "gpt/300/tp0-pp0/w.npy")->file == npy);
  CHECK(lookup(*rebuilt, "gpt/300/tp0-pp0")->children.size() == 1);
  CHECK(lookup(*rebuilt, "gpt/100") == lookup(*base, "gpt/100"));  // the base's subtrees were reused
}

TEST_CASE("nodes added with with_node: folders, many files, each tree sees only what was added up to it") {
  PendingEntry p{"gpt", "300", 1700000200, std::make_shared<int>(1), {}, {}};
  Contents c;
  c.pending.push_back(p);
  auto base = build(c);
  const Node* step = lookup(*base, "gpt/300");
  REQUIRE(step != nullptr);
  // A mkdir's folder, then files in it (what fs/write_ops.cc adds).
  Node dir;
  dir.ino = Tree::dir_ino("/gpt/300/tp0-pp0");
  dir.parent = step->ino;
  dir.is_dir = dir.writable = dir.pending = true;
  dir.path = "gpt/300/tp0-pp0";
  auto t = Tree::with_node(base, dir, "tp0-pp0");
  REQUIRE(t != nullptr);
  const uint64_t shard_dir = dir.ino;
  CHECK(lookup(*t, "gpt/300/tp0-pp0")->is_dir);
  CHECK(Tree::with_node(t, dir, "tp0-pp0") == nullptr);  // already there: the caller builds instead
  std::vector<std::shared_ptr<const Tree>> trees{t};
  constexpr int kFiles = 20000;
  for (int i = 0; i < kFiles; ++i) {
    const std::string name = "t" + std::to_string(i) + ".npy";
    Node n;
    n.ino = Tree::pending_file_ino("/gpt/300/tp0-pp0/" + name);
    n.parent = shard_dir;
    n.view = pending_view(std::make_shared<FakeWriteFile>(static_cast<uint64_t>(i)));
    n.writable = n.pending = true;
    t = Tree::with_node(t, std::move(n), name);
    REQUIRE(t != nullptr);
    if (i == 99) trees.push_back(t);
  }
  CHECK(t->added() == kFiles + 1);
  CHECK(lookup(*t, "gpt/300/tp0-pp0/t19999.npy")->view->size() == 19999);
  CHECK(t->added_children(shard_dir).size() == kFiles);
  // A tree made earlier shows what was added up to it, nothing later.
  CHECK(trees[1]->added() == 101);
  CHECK(lookup(*trees[1], "gpt/300/tp0-pp0/t99.npy") != nullptr);
  CHECK(lookup(*trees[1], "gpt/300/tp0-pp0/t100.npy") == nullptr);
  CHECK(trees[1]->find(Tree::pending_file_ino("/gpt/300/tp0-pp0/t100.npy")) == nullptr);
  CHECK(trees[1]->added_children(shard_dir).size() == 100);
  CHECK(trees[0]->added_children(shard_dir).empty());
  // Adding to that earlier tree leaves the later ones as they were.
  Node other;
  other.ino = Tree::pending_file_ino("/gpt/300/tp0-pp0/other.npy");
  other.parent = shard_dir;
  other.view = pending_view(std::make_shared<FakeWriteFile>(7));
  auto branch = Tree::with_node(trees[1], other, "other.npy");
  REQUIRE(branch != nullptr);
  CHECK(branch->added() == 102);
  CHECK(lookup(*branch, "gpt/300/tp0-pp0/other.npy")->view->size() == 7);
  CHECK(lookup(*branch, "gpt/300/tp0-pp0/t100.npy") == nullptr);
  CHECK(lookup(*t, "gpt/300/tp0-pp0/other.npy") == nullptr);
  CHECK(lookup(*t, "gpt/300/tp0-pp0/t100.npy") != nullptr);
}

TEST_CASE("a committed step replaces its pending one with new inode numbers for its files") {
  PendingEntry p{
      "gpt", "300", 1700000200, std::make_shared<int>(1), {}, {{"ptc.json", std::make_shared<FakeWriteFile>(10)}}};
  Contents pending;
  pending.pending.push_back(p);
  auto before = build(pending);
  Contents committed;
  committed.steps.push_back({"gpt", "300", std::make_shared<FakeStep>(4)});
  auto after = build(committed, before.get());
  CHECK(lookup(*after, "gpt/300")->ino == lookup(*before, "gpt/300")->ino);
  CHECK_FALSE(lookup(*after, "gpt/300")->pending);
  CHECK(lookup(*after, "gpt/300/ptc.json")->ino == xxh3(tagged("/gpt/300/ptc.json", "v4")));
  CHECK(lookup(*after, "gpt/300/ptc.json")->ino != lookup(*before, "gpt/300/ptc.json")->ino);
}

TEST_CASE("a pending step named like the datasets' folder is not shown, and hides nothing else") {
  Contents c = two_steps_and_a_dataset(std::make_shared<FakeStep>(1), std::make_shared<FakeStep>(2), small_jsonl(5));
  c.pending.push_back(PendingEntry{
      "gpt", kDataDir, 1700000200, std::make_shared<int>(1), {}, {{"ptc.json", std::make_shared<FakeWriteFile>(10)}}});
  auto t = build(c);
  CHECK(lookup(*t, "gpt/data/ptc.json") == nullptr);
  CHECK_FALSE(lookup(*t, "gpt/data")->pending);
  CHECK(lookup(*t, "gpt/data/web/state.json") != nullptr);
  CHECK(lookup(*t, "gpt/100/ptc.json") != nullptr);
}
