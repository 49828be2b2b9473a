// Datasets in the store with real RocksDB and blob files: add, read records, progress,
// restart, stale commits refused, and blobs kept while a version uses them.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "fs/dataset_views.h"
#include "daemon/dataset/dataset_ops.h"
#include "daemon/store/store.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;

namespace {

using testing::TempDir;

std::string read_records(const DatasetVersion& v, std::vector<fs::DatasetContent::Piece> pieces) {
  fs::ReadBuffer rb;
  REQUIRE(v.read_records(pieces, rb).is_ok());
  std::string out(rb.size(), '\0');
  REQUIRE(rb.copy_to(reinterpret_cast<std::byte*>(out.data())).is_ok());
  return out;
}

// Adds the dataset `req` names (over `dp` ranks) and commits it.
void add_dataset(Store& store, const DatasetAddRequest& req, int dp) {
  DatasetAddSummary summary;
  auto change = prepare_dataset_add(store, req, dp, "", summary);
  REQUIRE(change.is_ok());
  REQUIRE(commit_change(store, *change).is_ok());
}

}  // namespace

TEST_CASE("a JSONL dataset is stored, read by record, progressed and reloaded", "[dataset_store]") {
  TempDir tmp;
  const std::string src = tmp.path() + "/a.jsonl";
  {
    std::ofstream f(src, std::ios::binary);
    f << "{\"a\":0}\n\n{\"a\":1}\n  \n{\"a\":22}";  // blank lines skipped, no final newline
  }
  auto store = Store::open(tmp.path() + "/data");
  REQUIRE(store.is_ok());
  DatasetAddRequest req{"job", "ds", ptc::DatasetFormat::kJsonl, 9, 3, 3, {src}, false};
  DatasetAddSummary summary;
  auto change = prepare_dataset_add(**store, req, 3, "", summary);
  REQUIRE(change.is_ok());
  CHECK(fs::dataset_state(*change->datasets.front().next)["num_samples"] == 3);
  CHECK(summary.bytes == 28);
  REQUIRE(commit_change(**store, *change).is_ok());

  auto v = current_dataset(**store, "job", "ds");
  REQUIRE(v.is_ok());
  CHECK((*v)->record_bytes(0) == 8);
  CHECK((*v)->record_bytes(2) == 9);  // 8 bytes and a supplied newline
  CHECK(read_records(**v, {{2, 0, 9}, {0, 2, 3}, {1, 0, 8}}) == "{\"a\":22}\na\":{\"a\":1}\n");
  fs::ReadBuffer rb;
  CHECK((*v)->read_records({{3, 0, 1}}, rb).code() == Code::kOutOfRange);
  CHECK((*v)->read_records({{2, 5, 5}}, rb).code() == Code::kOutOfRange);

  // A progress made from a version that is no longer current is refused at commit.
  auto p1 = prepare_dataset_progress(**store, "job", "ds", {}, 3);
  auto p2 = prepare_dataset_progress(**store, "job", "ds", {}, 0);
  REQUIRE(p1.is_ok());
  REQUIRE(p2.is_ok());
  REQUIRE(commit_change(**store, *p1).is_ok());
  CHECK(commit_change(**store, *p2).code() == Code::kFailedPrecondition);
  // Claimed, a change of the dataset is the only one prepared until it ends; one prepared from
  // a version that is no longer current is refused when it claims, not at its commit.
  auto held = prepare_dataset_progress(**store, "job", "ds", {}, 0);
  REQUIRE(held.is_ok());
  REQUIRE(held->claim_datasets(**store).is_ok());
  auto second = prepare_dataset_progress(**store, "job", "ds", {}, 0);
  REQUIRE(second.is_ok());
  const Status busy = second->claim_datasets(**store);
  CHECK(busy.code() == Code::kFailedPrecondition);
  CHECK(busy.message() == "dataset job/ds is already being changed (a progress or a re-split is prepared)");
  abort_change(**store, *held);  // releases the claim
  auto stale = prepare_dataset_progress(**store, "job", "ds", {}, 0);
  REQUIRE(stale.is_ok());
  REQUIRE(second->claim_datasets(**store).is_ok());
  REQUIRE(commit_change(**store, *second).is_ok());
  const Status moved = stale->claim_datasets(**store);
  CHECK(moved.code() == Code::kFailedPrecondition);
  CHECK(moved.message() == "dataset job/ds changed while its new version was prepared (from version 2)");
  // 3 samples, batch 3: consuming the epoch starts the next.
  auto cur = current_dataset(**store, "job", "ds");
  CHECK((*cur)->position() == ptc::DatasetPosition{3, 1, 0});
  CHECK((*cur)->version() == 3);
  CHECK(resplit_datasets(**store, "job", 2).status().code() == Code::kInvalidArgument);
  CHECK(resplit_datasets(**store, "job", 3)->empty());

  REQUIRE((*store)->collect_garbage().is_ok());
  store->reset();
  auto again = Store::open(tmp.path() + "/data");
  REQUIRE(again.is_ok());
  auto back = current_dataset(**again, "job", "ds");
  REQUIRE(back.is_ok());
  CHECK((*back)->position() == ptc::DatasetPosition{3, 1, 0});
  CHECK(read_records(**back, {{1, 0, 8}}) == "{\"a\":1}\n");
}

TEST_CASE("records are read from mapped files, and a file cut short is an error, not a crash", "[dataset_store]") {
  TempDir tmp;
  const std::string src = tmp.path() + "/big.jsonl";
  std::string text;
  std::vector<std::string> lines;
  for (int i = 0; i < 3000; ++i) {
    lines.push_back("{\"id\":" + std::to_string(i) + ",\"t\":\"" + std::string(static_cast<size_t>(i % 50), 'q') +
                    "\"}\n");
    text += lines.back();
  }
  std::ofstream(src, std::ios::binary) << text;
  auto store = Store::open(tmp.path() + "/data");
  REQUIRE(store.is_ok());
  add_dataset(**store, {"job", "big", ptc::DatasetFormat::kJsonl, 1, 3, 1, {src}, false}, 1);
  auto v = current_dataset(**store, "job", "big");
  REQUIRE(v.is_ok());
  // Records in any order, whole and in parts, are exactly the lines.
  CHECK(read_records(**v, {{2999, 0, lines[2999].size()}, {0, 0, lines[0].size()}, {1500, 3, 4}}) ==
        lines[2999] + lines[0] + lines[1500].substr(3, 4));

  // Cut short within its last page, then to nothing (every page past the end): pread
  // names the file.
  for (const uint64_t size : {text.size() - 10, uint64_t{0}}) {
    REQUIRE(::truncate(src.c_str(), static_cast<off_t>(size)) == 0);
    fs::ReadBuffer rb;
    auto s = (*v)->read_records({{0, 0, 1}, {2999, 0, lines[2999].size()}}, rb);
    CHECK(s.code() == Code::kCorrupt);
    CHECK(s.message() == "dataset file " + src + " is shorter than when it was added");
  }
}

TEST_CASE("a new global batch re-splits a dataset from its consumed count, kept across a restart", "[dataset_store]") {
  TempDir tmp;
  const std::string src = tmp.path() + "/a.jsonl";
  {
    std::ofstream f(src, std::ios::binary);
    for (int i = 0; i < 10; ++i) f << "{\"i\":" << i << "}\n";
  }
  auto store = Store::open(tmp.path() + "/data");
  REQUIRE(store.is_ok());
  add_dataset(**store, {"job", "ds", ptc::DatasetFormat::kJsonl, 0, 4, 2, {src}, false}, 2);
  auto p = prepare_dataset_progress(**store, "job", "ds", {}, 4);
  REQUIRE(p.is_ok());
  REQUIRE(commit_change(**store, *p).is_ok());
  // A record written before batch_offset existed (no member) reads as offset 0.
  auto cur = current_dataset(**store, "job", "ds");
  REQUIRE(cur.is_ok());
  nlohmann::json old = (*cur)->to_json();
  REQUIRE(old.erase("batch_offset") == 1);
  auto loaded = DatasetVersion::load("job", "ds", old.dump(), (*store)->blobs(), nullptr);
  REQUIRE(loaded.is_ok());
  CHECK((*loaded)->position() == ptc::DatasetPosition{2, 0, 4, 0});

  // dp 3 does not divide 4 (the batch kept) nor 5: refused; 3 at dp 3 is taken at sample 4.
  CHECK(resplit_datasets(**store, "job", 3).status().message() ==
        "cannot re-split dataset job/ds: the global batch 4 is not divisible by dp=3");
  CHECK(resplit_datasets(**store, "job", 3, 5).status().message() ==
        "cannot re-split dataset job/ds: the global batch 5 is not divisible by dp=3");
  CHECK(resplit_datasets(**store, "job", 2, 4)->empty());  // nothing changes
  CHECK(resplit_datasets(**store, "other", 2, 4).status().message() ==
        "job 'other' has no dataset to take the global batch 4");
  CHECK(resplit_datasets(**store, "other", 2)->empty());
  auto r = resplit_datasets(**store, "job", 3, 3);
  REQUIRE(r.is_ok());
  REQUIRE(r->size() == 1);
  PreparedChange change(**store);
  change.datasets = std::move(r).value();
  REQUIRE(commit_change(**store, change).is_ok());
  store->reset();
  auto again = Store::open(tmp.path() + "/data");
  REQUIRE(again.is_ok());
  auto back = current_dataset(**again, "job", "ds");
  REQUIRE(back.is_ok());
  CHECK((*back)->spec().global_batch == 3);
  CHECK((*back)->position() == ptc::DatasetPosition{3, 0, 4, 4});
  CHECK((*back)->version() == 3);
  CHECK(fs::dataset_state(**back)["batch_offset"] == 4);
}

TEST_CASE("a progress may re-split the dataset in the same version (a mesh changed without a repartition)",
          "[dataset_store]") {
  TempDir tmp;
  const std::string src = tmp.path() + "/a.jsonl";
  {
    std::ofstream f(src, std::ios::binary);
    for (int i = 0; i < 20; ++i) f << "{\"i\":" << i << "}\n";
  }
  auto store = Store::open(tmp.path() + "/data");
  REQUIRE(store.is_ok());
  add_dataset(**store, {"job", "ds", ptc::DatasetFormat::kJsonl, 0, 4, 20, {src}, false}, 2);
  // To sample 8 and dp 4 with the batch kept: the position moves, the offset stays 0.
  auto p = prepare_dataset_progress(**store, "job", "ds", {}, 8, {}, 4);
  REQUIRE(p.is_ok());
  CHECK(p->datasets.front().next->position() == ptc::DatasetPosition{4, 0, 8, 0});
  CHECK(p->datasets.front().next->spec().global_batch == 4);
  REQUIRE(commit_change(**store, *p).is_ok());
  // To sample 12 with dp 3 and batch 6: batches of 6 start at 12 (two more fit in the epoch).
  auto q = prepare_dataset_progress(**store, "job", "ds", {}, 12, {}, 3, 6);
  REQUIRE(q.is_ok());
  const auto& next = *q->datasets.front().next;
  CHECK(next.position() == ptc::DatasetPosition{3, 0, 12, 12});
  CHECK(next.spec().global_batch == 6);
  CHECK(fs::dataset_state(next)["samples_per_epoch"] == 18);  // 12 + (20 - 12) div 6 * 6
  // dp must divide the (new) batch; nothing is prepared then.
  CHECK(prepare_dataset_progress(**store, "job", "ds", {}, 12, {}, 5).status().message() ==
        "cannot re-split dataset job/ds: the global batch 4 is not divisible by dp=5");
  CHECK(prepare_dataset_progress(**store, "job", "ds", {}, 12, {}, 4, 6).status().message() ==
        "cannot re-split dataset job/ds: the global batch 6 is not divisible by dp=4");
  // A position the old batch does not allow is refused before any re-split.
  CHECK(!prepare_dataset_progress(**store, "job", "ds", {}, 10, {}, 3, 6).is_ok());
  REQUIRE(commit_change(**store, *q).is_ok());

  // Back to a checkpoint taken before that change (batch 4 from 0, at sample 4): set exactly.
  auto back = prepare_dataset_progress(**store, "job", "ds", 0, 4, {}, 1, 4, 0);
  REQUIRE(back.is_ok());
  CHECK(back->datasets.front().next->position() == ptc::DatasetPosition{1, 0, 4, 0});
  CHECK(back->datasets.front().next->spec().global_batch == 4);
  CHECK(prepare_dataset_progress(**store, "job", "ds", {}, 4, {}, 1, 4, 0).status().message() ==
        "dataset job/ds: a batch_offset is set together with its epoch and global batch");
  CHECK(prepare_dataset_progress(**store, "job", "ds", 0, 6, {}, 1, 4, 0).status().message() ==
        "dataset job/ds: consumed 6 is not a multiple of the global batch 4");
  CHECK(prepare_dataset_progress(**store, "job", "ds", 0, 4, {}, 1, 40, 0).status().message() ==
        "dataset job/ds: the dataset has 20 samples, fewer than one global batch of 40");
}
