#include "daemon/change/local_runner.h"

#include <catch2/catch.hpp>

#include "daemon/reshard/extent_map.h"
#include "daemon/save/save_service.h"
#include "ptc/plan.h"
#include "tests/daemon/store/store_fixture.h"
#include "tests/daemon/temp_dir.h"

namespace ptcfs::testing {
namespace {

struct Node {
  explicit Node(const std::string& dir)
      : store(open_store(dir)), saves(*store, {}, {}), runner(*store, saves, CompactionPolicy{}) {}
  std::unique_ptr<Store> store;
  SaveService saves;
  LocalRunner runner;
};

}  // namespace

TEST_CASE("the local runner imports, repartitions and removes a step on this node", "[local_runner]") {
  TempDir tmp;
  const SliceBytes want = write_checkpoint(tmp.path() + "/ckpt", kPtcJson);
  Node n(tmp.path() + "/data");
  std::vector<std::string> phases;
  auto progress = [&](const std::string& phase, uint64_t, uint64_t) {
    if (phases.empty() || phases.back() != phase) phases.push_back(phase);
  };

  auto imported =
      n.runner.import(ImportRequest{tmp.path() + "/ckpt", "job", "1", {}, std::nullopt, std::nullopt}, progress);
  REQUIRE(imported.is_ok());
  CHECK(imported->job == "job");
  CHECK(imported->format == "ptc");
  CHECK(imported->shards == 4);
  CHECK(imported->tensors == 6);
  CHECK(imported->nodes.empty());
  CHECK(phases == std::vector<std::string>{"copy"});
  check_step(*n.store, "job", "1", want);

  auto moved = n.runner.repartition(RepartitionRequest{"job", "1", ptc::Parallelism{1, 2, 2}, false, {}, 0}, {});
  REQUIRE(moved.is_ok());
  CHECK(moved->version == 2);
  CHECK(moved->bytes_moved == 0);
  CHECK(find_step(*n.store, "job", "1")->layout().parallelism().tp == 1);

  REQUIRE(n.runner.remove(RemoveRequest{"job", "1"}).is_ok());
  CHECK(n.store->snapshot()->steps.count({"job", "1"}) == 0);
  const auto again = n.runner.remove(RemoveRequest{"job", "1"});
  CHECK(again.code() == Code::kNotFound);
}

TEST_CASE("a change of dp alone keeps every slice where it was, as planning it would", "[local_runner]") {
  TempDir tmp;
  const SliceBytes want = write_checkpoint(tmp.path() + "/ckpt", kPtcJson);
  Node n(tmp.path() + "/data");
  REQUIRE(n.runner.import(ImportRequest{tmp.path() + "/ckpt", "job", "1", {}, std::nullopt, std::nullopt}, {}).is_ok());
  const auto old = find_step(*n.store, "job", "1");
  const ptc::Layout& from = old->layout();
  // What the general path makes of this change: a plan, then its extents mapped.
  auto to = from.at(ptc::Parallelism{2, 2, 3});
  REQUIRE(to.is_ok());
  CHECK(ptc::Layout::same_split(from, *to));
  CHECK_FALSE(ptc::Layout::same_split(from, *ptc::Layout::make(from.ptc(), ptc::Parallelism{2, 2, 3})));
  auto plan = ptc::make_plan(from, *to, ptc::Holdings::single_node(from, *to));
  REQUIRE(plan.is_ok());
  const auto planned = map_extents(from, *to, *plan, [&](uint32_t shard, uint32_t slice) -> const StoredSlice& {
    return old->stored(from.shards()[shard], slice);
  });

  auto moved = n.runner.repartition(RepartitionRequest{"job", "1", ptc::Parallelism{2, 2, 3}, false, {}, 0}, {});
  REQUIRE(moved.is_ok());
  CHECK(moved->version == 2);
  CHECK(moved->bytes_moved == 0);
  // Reported as the plan would have: the counts a dp change shows whichever path it takes.
  CHECK(moved->copies == plan->copies.size());
  CHECK(moved->fills == plan->fills.size());
  CHECK(moved->bytes_total == plan->bytes_total);
  CHECK(moved->bytes_fill == plan->bytes_fill);
  CHECK(moved->bytes_fill > 0);  // emb's padding
  const auto next = find_step(*n.store, "job", "1");
  CHECK(next->layout().parallelism() == ptc::Parallelism{2, 2, 3});
  REQUIRE(planned.size() == next->layout().shards().size());
  for (size_t i = 0; i < planned.size(); ++i) {
    const auto& shard = next->layout().shards()[i];
    REQUIRE(planned[i].size() == next->layout().slices(shard).size());
    for (size_t j = 0; j < planned[i].size(); ++j) {
      INFO(shard.name() << " slice " << j);
      const StoredSlice& got = next->stored(shard, j);
      CHECK(got.rows == planned[i][j].rows);
      CHECK(got.xxh3 == old->stored(shard, j).xxh3);
      CHECK(slice_bytes(got) == slice_bytes(planned[i][j]));
      const std::string bytes = read_all(*next, shard, j, 0, slice_bytes(got));
      CHECK(bytes == read_all(*old, shard, j, 0, slice_bytes(got)));
      CHECK(bytes == want.at({shard.name(), next->layout().tensor(next->layout().slices(shard)[j]).name}));
    }
  }
}

TEST_CASE("the local runner refuses --nodes: there is no other node", "[local_runner]") {
  TempDir tmp;
  write_checkpoint(tmp.path() + "/ckpt", kPtcJson);
  Node n(tmp.path() + "/data");
  auto r = n.runner.import(ImportRequest{tmp.path() + "/ckpt", "job", "1", {"n1"}, std::nullopt, std::nullopt}, {});
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().to_string() == "invalid_argument: --nodes needs a daemon in a cluster");
  CHECK(n.store->snapshot()->steps.count({"job", "1"}) == 0);
  auto p = n.runner.repartition(RepartitionRequest{"job", "1", ptc::Parallelism{1, 1, 1}, false, {"n0"}, 0}, {});
  CHECK(p.status().to_string() == "invalid_argument: --nodes needs a daemon in a cluster");
}

TEST_CASE("a save commit of a step that is not pending does nothing", "[local_runner]") {
  TempDir tmp;
  Node n(tmp.path() + "/data");
  CHECK(n.runner.save_commit(SaveCommitRequest{"job", "1"}).is_ok());
  CHECK(n.store->snapshot()->steps.empty());
  CHECK_FALSE(n.runner.status().cluster);
}

}  // namespace ptcfs::testing
