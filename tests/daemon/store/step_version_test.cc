// The pieces of a strided slice: row r of extent e at e.offset + r * e.stride.
#include <catch2/catch.hpp>

#include <memory>
#include <tuple>
#include <vector>

#include "daemon/store/step_version.h"
#include "ptc/layout.h"

using namespace ptcfs;

namespace {
using Piece = std::tuple<uint64_t, uint64_t, uint64_t>;  // blob, offset, length
std::vector<Piece> pieces(const StoredSlice& s, uint64_t off, uint64_t len) {
  std::vector<Piece> out;
  for_each_piece(s, off, len, [&](uint64_t b, uint64_t o, uint64_t n) { out.emplace_back(b, o, n); });
  return out;
}
}  // namespace

TEST_CASE("a strided slice is its rows, each the concatenation of its extents", "[step_version]") {
  StoredSlice s;
  s.rows = 3;
  s.extents = {Extent{7, 100, 4, 10}, Extent{kZeroBlob, 0, 2, 0}, Extent{8, 0, 3, 3}};
  CHECK(row_bytes(s) == 9);
  CHECK(slice_bytes(s) == 27);
  CHECK(pieces(s, 0, 27) == std::vector<Piece>{{7, 100, 4},
                                               {0, 0, 2},
                                               {8, 0, 3},  //
                                               {7, 110, 4},
                                               {0, 0, 2},
                                               {8, 3, 3},  //
                                               {7, 120, 4},
                                               {0, 0, 2},
                                               {8, 6, 3}});
  // A window starting inside row 1's first extent and ending inside row 2's second.
  CHECK(pieces(s, 11, 11) == std::vector<Piece>{{7, 112, 2}, {0, 0, 2}, {8, 3, 3}, {7, 120, 4}});
}

TEST_CASE("a flat slice is its extents in order", "[step_version]") {
  StoredSlice s;
  s.extents = {Extent{3, 0, 10, 0}, Extent{4, 50, 5, 0}};
  CHECK(slice_bytes(s) == 15);
  CHECK(pieces(s, 8, 4) == std::vector<Piece>{{3, 8, 2}, {4, 50, 2}});
}

namespace {
// Records what walk_slice hands a sink.
struct Recorder final : PieceSink {
  std::vector<Piece> got;  // blob (0: zeros), offset, length
  Status fail_at_blob = Status::ok();
  Status zeros(uint64_t n) override {
    got.emplace_back(kZeroBlob, 0, n);
    return Status::ok();
  }
  Status blob(const std::shared_ptr<const BlobFile>& f, uint64_t off, uint64_t n) override {
    got.emplace_back(f->id(), off, n);
    return fail_at_blob;
  }
};
}  // namespace

TEST_CASE("walk_slice hands the sink a slice's pieces, opening each blob once", "[step_version]") {
  StoredSlice s;
  s.rows = 2;
  s.extents = {Extent{7, 100, 4, 10}, Extent{7, 200, 2, 10}, Extent{kZeroBlob, 0, 3, 0}, Extent{8, 0, 1, 1}};
  std::vector<uint64_t> opened;
  const OpenBlob open = [&](uint64_t id) -> Result<std::shared_ptr<const BlobFile>> {
    opened.push_back(id);
    return std::make_shared<const BlobFile>(id, -1, 1000);
  };
  Recorder r;
  REQUIRE(walk_slice(s, 0, slice_bytes(s), open, r).is_ok());
  CHECK(r.got == std::vector<Piece>{{7, 100, 4},
                                    {7, 200, 2},
                                    {0, 0, 3},
                                    {8, 0, 1},  //
                                    {7, 110, 4},
                                    {7, 210, 2},
                                    {0, 0, 3},
                                    {8, 1, 1}});
  CHECK(opened == std::vector<uint64_t>{7, 8});  // not once per row: the rows alternate between them

  SECTION("the first error of the sink stops the walk") {
    Recorder f;
    f.fail_at_blob = corrupt("short");
    CHECK(walk_slice(s, 0, slice_bytes(s), open, f).code() == Code::kCorrupt);
    CHECK(f.got.size() == 1);
  }
  SECTION("so does an error opening a blob") {
    Recorder f;
    const OpenBlob fails = [](uint64_t) -> Result<std::shared_ptr<const BlobFile>> {
      return io_error("opening blob", 5);
    };
    CHECK(walk_slice(s, 0, slice_bytes(s), fails, f).code() == Code::kIo);
    CHECK(f.got.empty());
  }
}

namespace {
// Records what walk_slice hands a sink that takes rows: rows() calls as (rows, pieces), and
// pieces of partial rows as Recorder does. With `decline`, rows() leaves every call's rows to
// walk_slice.
struct RowRecorder final : PieceSink {
  struct RowPiece {
    uint64_t blob, off, len, stride;
    bool operator==(const RowPiece&) const = default;
  };
  std::vector<std::pair<uint64_t, std::vector<RowPiece>>> rows_got;
  std::vector<Piece> got;
  bool decline = false;
  Status zeros(uint64_t n) override {
    got.emplace_back(kZeroBlob, 0, n);
    return Status::ok();
  }
  Status blob(const std::shared_ptr<const BlobFile>& f, uint64_t off, uint64_t n) override {
    got.emplace_back(f->id(), off, n);
    return Status::ok();
  }
  bool takes_rows() const override { return true; }
  Result<bool> rows(uint64_t rows, const std::vector<PieceSink::RowPiece>& pieces) override {
    std::vector<RowPiece> p;
    for (const auto& x : pieces) p.push_back({x.file ? x.file->id() : kZeroBlob, x.off, x.len, x.stride});
    rows_got.emplace_back(rows, p);
    return !decline;
  }
};
}  // namespace

TEST_CASE("a sink that takes rows gets a range's whole rows in one call, a partial row piece by piece",
          "[step_version]") {
  StoredSlice s;
  s.rows = 4;  // a row: 4 bytes of blob 7, 3 zeros, 2 bytes of blob 8 (9 bytes)
  s.extents = {Extent{7, 100, 4, 10}, Extent{kZeroBlob, 0, 3, 0}, Extent{8, 0, 2, 5}};
  std::vector<uint64_t> opened;
  const OpenBlob open = [&](uint64_t id) -> Result<std::shared_ptr<const BlobFile>> {
    opened.push_back(id);
    return std::make_shared<const BlobFile>(id, -1, 1000);
  };
  RowRecorder r;
  // From byte 5 of row 0 to byte 3 of row 3: the rest of row 0, rows 1 and 2, the start of row 3.
  REQUIRE(walk_slice(s, 5, 4 + 2 * 9 + 3, open, r).is_ok());
  using RP = RowRecorder::RowPiece;
  REQUIRE(r.rows_got.size() == 1);
  CHECK(r.rows_got[0].first == 2);
  CHECK(r.rows_got[0].second == std::vector<RP>{{7, 110, 4, 10}, {kZeroBlob, 0, 3, 0}, {8, 5, 2, 5}});
  CHECK(r.got == std::vector<Piece>{{0, 0, 2}, {8, 0, 2}, {7, 130, 3}});
  CHECK(opened == std::vector<uint64_t>{8, 7});

  SECTION("less than a row goes piece by piece") {
    RowRecorder small;
    REQUIRE(walk_slice(s, 9, 8, open, small).is_ok());
    CHECK(small.rows_got.empty());
    CHECK(small.got == std::vector<Piece>{{7, 110, 4}, {0, 0, 3}, {8, 5, 1}});
  }
  SECTION("rows the sink leaves go piece by piece, where they lie") {
    RowRecorder left;
    left.decline = true;
    REQUIRE(walk_slice(s, 5, 4 + 2 * 9 + 3, open, left).is_ok());
    CHECK(left.rows_got.size() == 1);
    CHECK(
        left.got ==
        std::vector<Piece>{
            {0, 0, 2}, {8, 0, 2}, {7, 110, 4}, {0, 0, 3}, {8, 5, 2}, {7, 120, 4}, {0, 0, 3}, {8, 10, 2}, {7, 130, 3}});
  }
  SECTION("whole rows from the first: one call") {
    RowRecorder all;
    REQUIRE(walk_slice(s, 0, slice_bytes(s), open, all).is_ok());
    CHECK(all.got.empty());
    REQUIRE(all.rows_got.size() == 1);
    CHECK(all.rows_got[0].first == 4);
    CHECK(all.rows_got[0].second == std::vector<RP>{{7, 100, 4, 10}, {kZeroBlob, 0, 3, 0}, {8, 0, 2, 5}});
  }
}

TEST_CASE("every version has a serial of its own, one made where a removed one was too", "[step_version]") {
  // What SlabDigests keys by: it holds nothing of a version, so a removed one's memory is
  // freed at once and the next version may be made at its address.
  auto p = ptc::parse_ptc_json(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 1, "tensors": {
    "w": {"dtype": "F32", "shape": [2], "tp_dim": 0, "layer": 0}}})",
                               "ptc.json");
  REQUIRE(p.is_ok());
  auto layout = ptc::Layout::make(*p, p->parallelism);
  REQUIRE(layout.is_ok());
  auto make = [&] {
    return std::make_shared<const StepVersion>("j", "s", 1, 0, *layout, std::vector<std::vector<StoredSlice>>(1),
                                               nullptr);
  };
  auto v = make();
  const void* where = v.get();
  const uint64_t first = v->serial();
  v.reset();
  std::vector<std::shared_ptr<const StepVersion>> made;
  for (int i = 0; i < 100 && (made.empty() || made.back().get() != where); ++i) made.push_back(make());
  REQUIRE(made.back().get() == where);  // the allocator reused the removed version's memory
  CHECK(made.back()->serial() != first);
  CHECK(made.front()->serial() == first + 1);
}
