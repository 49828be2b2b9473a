// A stock DCP save becomes a ptcfs step (daemon/save/dcp_save.h): the PTC and every copy that
// plan_dcp_save decides from the metadata and each chunk's torch.save record, exactly; and what
// it refuses (a chunk not in C order, a record that contradicts the metadata, ptcfs's own names).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "daemon/save/dcp_save.h"

using namespace ptcfs;

namespace {

ptc::DcpChunk chunk(ptc::Shape offsets, ptc::Shape sizes, std::string file, uint64_t offset, uint64_t length) {
  ptc::DcpChunk c;
  c.offsets = std::move(offsets);
  c.sizes = std::move(sizes);
  c.file = std::move(file);
  c.offset = offset;
  c.length = length;
  return c;
}

// w: F32 [4, 6] saved as two column halves (TP on dimension 1), one per rank's file; a scalar;
// and a bytes item.
ptc::DcpMetadata metadata() {
  ptc::DcpMetadata md;
  ptc::DcpItem step;
  step.fqn = "step";
  step.bytes = true;
  step.chunks = {chunk({}, {}, "__0_0.distcp", 0, 700)};
  ptc::DcpItem scalar;
  scalar.fqn = "optim.state.w.step";
  scalar.dtype = ptc::DType::F32;
  scalar.chunks = {chunk({}, {}, "__0_0.distcp", 700, 900)};
  ptc::DcpItem w;
  w.fqn = "w";
  w.dtype = ptc::DType::F32;
  w.size = {4, 6};
  w.chunks = {chunk({0, 0}, {4, 3}, "__0_0.distcp", 1600, 1000), chunk({0, 3}, {4, 3}, "__1_0.distcp", 0, 1000)};
  md.items = {scalar, step, w};
  md.planner_data = {
      {"optim.state.w.step", {std::string("optim"), std::string("state"), std::string("w"), std::string("step")}},
      {"w", {std::string("w")}},
      {"groups.0.lr", {std::string("groups"), int64_t{0}, std::string("lr")}}};
  return md;
}

// Each record's data at byte 128 of its archive, C order.
ptc::Result<ptc::TorchTensorItem> record(const ptc::DcpItem& t, const ptc::DcpChunk& c) {
  ptc::TorchTensorItem r;
  r.dtype = t.dtype;
  r.shape = c.sizes;
  r.stride.assign(c.sizes.size(), 1);
  for (size_t i = c.sizes.size(); i-- > 1;) r.stride[i - 1] = r.stride[i] * c.sizes[i];
  r.data_offset = 128;
  r.data_length = static_cast<uint64_t>(ptc::num_elements(c.sizes)) * 4;
  return r;
}

const DcpTensorFile& file_of(const DcpSave& s, const std::string& name) {
  for (const auto& f : s.files)
    if (f.name == name) return f;
  FAIL("no file " << name);
  return s.files.front();
}

}  // namespace

TEST_CASE("a DCP save's PTC and copies: each tensor whole, chunks to their boxes, bytes items and planner data") {
  auto save = plan_dcp_save(metadata(), record, "j/1");
  REQUIRE(save.is_ok());
  std::vector<std::string> names;
  for (const auto& t : save->ptc.tensors) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"__dcp__/bytes/step", "__dcp__/planner_data", "optim.state.w.step", "w"});
  CHECK(save->ptc.parallelism == ptc::Parallelism{1, 1, 1});
  for (const auto& t : save->ptc.tensors) CHECK(!t.tp_dim);

  const auto& w = file_of(*save, "w");
  CHECK(w.dtype == ptc::DType::F32);
  CHECK(w.shape == ptc::Shape{4, 6});
  // Each row of a column half is one run: 12 bytes, to row r's first or second half.
  REQUIRE(w.copies.size() == 8);
  for (int64_t r = 0; r < 4; ++r) {
    const auto& a = w.copies[static_cast<size_t>(r)];
    CHECK(a.file == "__0_0.distcp");
    CHECK(a.src == 1600 + 128 + static_cast<uint64_t>(r) * 12);
    CHECK(a.dst == static_cast<uint64_t>(r) * 24);
    CHECK(a.len == 12);
    const auto& b = w.copies[static_cast<size_t>(4 + r)];
    CHECK(b.file == "__1_0.distcp");
    CHECK(b.src == 128 + static_cast<uint64_t>(r) * 12);
    CHECK(b.dst == static_cast<uint64_t>(r) * 24 + 12);
  }
  const auto& scalar = file_of(*save, "optim.state.w.step");
  CHECK(scalar.shape.empty());
  REQUIRE(scalar.copies.size() == 1);
  CHECK(scalar.copies[0].src == 700 + 128);
  CHECK(scalar.copies[0].len == 4);

  // A bytes item is its torch.save bytes as DCP wrote them, whole.
  const auto& step = file_of(*save, "__dcp__/bytes/step");
  CHECK(step.dtype == ptc::DType::U8);
  CHECK(step.shape == ptc::Shape{700});
  REQUIRE(step.copies.size() == 1);
  CHECK((step.copies[0].src == 0 && step.copies[0].len == 700 && step.copies[0].file == "__0_0.distcp"));

  const auto& planner = file_of(*save, "__dcp__/planner_data");
  CHECK(planner.bytes ==
        R"({"groups.0.lr":["groups",0,"lr"],"optim.state.w.step":["optim","state","w","step"],"w":["w"]})");
  CHECK(planner.shape == ptc::Shape{static_cast<int64_t>(planner.bytes.size())});
  CHECK(save->bytes == 96 + 4 + 700);
}

TEST_CASE("a chunk saved from a view (not in C order) is gathered: its record's strides, from its storage") {
  auto transposed = [](const ptc::DcpItem& t, const ptc::DcpChunk& c) {
    auto r = record(t, c);
    if (t.fqn == "w") r->stride = {1, 4};  // a [3, 4] tensor's .t()
    r->storage_offset = 2;
    return r;
  };
  auto save = plan_dcp_save(metadata(), transposed, "j/1");
  REQUIRE(save.is_ok());
  const auto& w = file_of(*save, "w");
  CHECK(w.copies.empty());
  REQUIRE(w.gathers.size() == 2);
  CHECK(w.gathers[0].file == "__0_0.distcp");
  CHECK(w.gathers[0].src == 1600 + 128 + 2 * 4);
  CHECK(w.gathers[0].span == (3 * 1 + 2 * 4 + 1) * 4);  // to element (3, 2) of a [4, 3] chunk with strides (1, 4)
  CHECK(w.gathers[0].offsets == ptc::Shape{0, 0});
  CHECK(w.gathers[0].sizes == ptc::Shape{4, 3});
  CHECK(w.gathers[0].stride == ptc::Shape{1, 4});
  CHECK(w.gathers[1].offsets == ptc::Shape{0, 3});
  CHECK(save->bytes == 96 + 4 + 700);
}

TEST_CASE("a chunk that cannot be gathered, or a record that contradicts the metadata, is refused naming the chunk") {
  SECTION("strides of a view, over more than 1 GiB") {
    auto transposed = [](const ptc::DcpItem& t, const ptc::DcpChunk& c) {
      auto r = record(t, c);
      if (t.fqn == "w") r->stride = {1, int64_t{1} << 29};
      return r;
    };
    auto save = plan_dcp_save(metadata(), transposed, "j/1");
    REQUIRE(!save.is_ok());
    CHECK_THAT(save.status().message(),
               Catch::Contains("chunk of 'w' at [0, 0] is stored with strides [1, 536870912] (not in C order) over"));
  }
  SECTION("another dtype") {
    auto other = [](const ptc::DcpItem& t, const ptc::DcpChunk& c) {
      auto r = record(t, c);
      r->dtype = ptc::DType::BF16;
      return r;
    };
    auto save = plan_dcp_save(metadata(), other, "j/1");
    REQUIRE(!save.is_ok());
    CHECK_THAT(save.status().message(), Catch::Contains("holds BF16 where the metadata says F32"));
  }
  SECTION("another shape") {
    auto other = [](const ptc::DcpItem& t, const ptc::DcpChunk& c) {
      auto r = record(t, c);
      if (t.fqn == "w") r->shape = {3, 4};
      return r;
    };
    auto save = plan_dcp_save(metadata(), other, "j/1");
    REQUIRE(!save.is_ok());
    CHECK_THAT(save.status().message(), Catch::Contains("holds shape [3, 4] where the metadata says [4, 3]"));
  }
  SECTION("a name under __dcp__/") {
    auto md = metadata();
    md.items[2].fqn = "__dcp__/planner_data";
    auto save = plan_dcp_save(md, record, "j/1");
    REQUIRE(!save.is_ok());
    CHECK_THAT(save.status().message(), Catch::Contains("names under __dcp__/ are ptcfs's own"));
  }
}
