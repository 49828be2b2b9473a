// A stock DCP save becomes a ptcfs step (daemon/save/dcp_save.h): the PTC and every copy that
// plan_dcp_save decides from the metadata and each chunk's torch.save record, exactly; and what
// it refuses (a chunk not in C order, a record that contradicts the metadata, ptcfs's own names).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "daemon/save/dcp_save.h"

using namespace ptcfs;

namespace {

formats::DcpChunk chunk(ptc::Shape offsets, ptc::Shape sizes, std::string file, uint64_t offset, uint64_t length) {
  formats::DcpChunk c;
  c.offsets = std::move(offsets);
  c.sizes = std::move(sizes);
  c.file = std::move(file);
  c.offset = offset;
  c.length = length;
  return c;
}

// w: F32 [4, 6] saved as two column halves (TP on dimension 1), one per rank's file; a scalar;
// and a bytes item.
formats::DcpMetadata metadata() {
  formats::DcpMetadata md;
  formats::DcpItem step;
  step.fqn = "step";
  step.bytes = true;
  step.chunks = {chunk({}, {}, "__0_0.distcp", 0, 700)};
  formats::DcpItem scalar;
  scalar.fqn = "optim.state.w.step";
  scalar.dtype = ptc::DType::F32;
  scalar.chunks = {chunk({}, {}, "__0_0.distcp", 700, 900)};
  formats::DcpItem w;
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
Result<formats::TorchTensorItem> record(const formats::DcpItem& t, const formats::DcpChunk& c) {
  formats::TorchTensorItem r;
  r.dtype = t.dtype;
  r.shape = c.sizes;
  r.stride.assign(c.sizes.size(), 1);
  for (size_t i = c.sizes.size(); i-- > 1;) r.stride[i - 1] = r.stride[i] * c.sizes[i];
  r.data_offset = 128;
  r.data_length = static_cast<uint64_t>(ptc::num_elements(c.sizes)) * 4;
  return r;
}

const DcpTensorFile& file_of(const DcpSave& s, const std::string& name, int shard = 0) {
  for (const auto& f : s.files)
    if (f.name == name && f.shard == shard) return f;
  FAIL("no file " << name << " of shard " << shard);
  return s.files.front();
}

// A metadata of one F32 tensor `v` of `size`, its chunks `boxes` ({offsets, sizes}), each in a
// file of its own at offset 0.
formats::DcpMetadata one_tensor(ptc::Shape size, std::vector<std::pair<ptc::Shape, ptc::Shape>> boxes) {
  formats::DcpMetadata md;
  formats::DcpItem v;
  v.fqn = "v";
  v.dtype = ptc::DType::F32;
  v.size = std::move(size);
  int i = 0;
  for (auto& [off, sz] : boxes) {
    const auto n = static_cast<uint64_t>(ptc::num_elements(sz)) * 4 + 128;
    v.chunks.push_back(chunk(off, sz, "__" + std::to_string(i++) + "_0.distcp", 0, n));
  }
  md.items = {v};
  return md;
}

}  // namespace

TEST_CASE(
    "a DCP save's PTC and copies: split as the chunks split it, chunks to their slices, bytes items and planner "
    "data in every shard") {
  auto save = plan_dcp_save(metadata(), record, "j/1");
  REQUIRE(save.is_ok());
  std::vector<std::string> names;
  for (const auto& t : save->ptc.tensors) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"__dcp__/bytes/step", "__dcp__/planner_data", "optim.state.w.step", "w"});
  // w's two column halves: tp 2 along dimension 1, each half one slice.
  CHECK(save->ptc.parallelism == ptc::Parallelism{2, 1, 1});
  const auto* wspec = save->ptc.find("w");
  REQUIRE(wspec);
  CHECK(wspec->tp_dim == 1);
  CHECK(wspec->pad_to == 1);
  for (const auto& t : save->ptc.tensors)
    if (t.name != "w") CHECK(!t.tp_dim);
  REQUIRE(save->files.size() == 8);  // 4 tensors x 2 shards

  for (int t = 0; t < 2; ++t) {
    const auto& w = file_of(*save, "w", t);
    CHECK(w.dtype == ptc::DType::F32);
    CHECK(w.shape == ptc::Shape{4, 3});
    // The half is the whole slice: one run of its 48 bytes.
    REQUIRE(w.copies.size() == 1);
    CHECK(w.copies[0].file == (t == 0 ? "__0_0.distcp" : "__1_0.distcp"));
    CHECK(w.copies[0].src == (t == 0 ? 1600u : 0u) + 128);
    CHECK(w.copies[0].dst == 0);
    CHECK(w.copies[0].len == 48);
    CHECK(w.zeros.empty());

    const auto& scalar = file_of(*save, "optim.state.w.step", t);
    CHECK(scalar.shape.empty());
    REQUIRE(scalar.copies.size() == 1);
    CHECK(scalar.copies[0].src == 700 + 128);
    CHECK(scalar.copies[0].len == 4);

    // A bytes item is its torch.save bytes as DCP wrote them, whole.
    const auto& step = file_of(*save, "__dcp__/bytes/step", t);
    CHECK(step.dtype == ptc::DType::U8);
    CHECK(step.shape == ptc::Shape{700});
    REQUIRE(step.copies.size() == 1);
    CHECK((step.copies[0].src == 0 && step.copies[0].len == 700 && step.copies[0].file == "__0_0.distcp"));

    const auto& planner = file_of(*save, "__dcp__/planner_data", t);
    CHECK(planner.bytes ==
          R"({"groups.0.lr":["groups",0,"lr"],"optim.state.w.step":["optim","state","w","step"],"w":["w"]})");
    CHECK(planner.shape == ptc::Shape{static_cast<int64_t>(planner.bytes.size())});
  }
  CHECK(save->bytes == 96 + 2 * (4 + 700));
}

TEST_CASE("uneven rows (DTensor's Shard(0) of 10 rows over 4 ranks) become a padded split, padding written as zeros") {
  // 3, 3, 3 and 1 rows of 6 F32.
  auto md = one_tensor({10, 6}, {{{0, 0}, {3, 6}}, {{3, 0}, {3, 6}}, {{6, 0}, {3, 6}}, {{9, 0}, {1, 6}}});
  auto save = plan_dcp_save(md, record, "j/1");
  REQUIRE(save.is_ok());
  CHECK(save->ptc.parallelism == ptc::Parallelism{4, 1, 1});
  for (int t = 0; t < 4; ++t) {
    const auto& v = file_of(*save, "v", t);
    CHECK(v.shape == ptc::Shape{3, 6});
    REQUIRE(v.copies.size() == 1);
    CHECK(v.copies[0].file == "__" + std::to_string(t) + "_0.distcp");
    CHECK(v.copies[0].src == 128);
    CHECK(v.copies[0].dst == 0);
    CHECK(v.copies[0].len == (t < 3 ? 72u : 24u));
    if (t < 3) {
      CHECK(v.zeros.empty());
    } else {  // rows 10 and 11 are padding
      REQUIRE(v.zeros.size() == 1);
      CHECK((v.zeros[0].dst == 24 && v.zeros[0].len == 48));
    }
  }
}

TEST_CASE("a 2 x 2 grid of chunks is split along dimension 0; each slice takes its two chunks row by row") {
  // [4, 6]: rows 0-1 and 2-3, columns 0-2 and 3-5.
  auto md = one_tensor({4, 6}, {{{0, 0}, {2, 3}}, {{0, 3}, {2, 3}}, {{2, 0}, {2, 3}}, {{2, 3}, {2, 3}}});
  auto save = plan_dcp_save(md, record, "j/1");
  REQUIRE(save.is_ok());
  CHECK(save->ptc.tensors[1].tp_dim == 0);  // after __dcp__/planner_data
  // No tp makes a slice one chunk: tp 1, the whole tensor, four chunks of two rows each.
  CHECK(save->ptc.parallelism == ptc::Parallelism{1, 1, 1});
  const auto& v = file_of(*save, "v", 0);
  CHECK(v.shape == ptc::Shape{4, 6});
  REQUIRE(v.copies.size() == 8);
  CHECK((v.copies[0].file == "__0_0.distcp" && v.copies[0].dst == 0 && v.copies[0].len == 12));
  CHECK((v.copies[1].file == "__0_0.distcp" && v.copies[1].src == 128 + 12 && v.copies[1].dst == 24));
  CHECK((v.copies[6].file == "__3_0.distcp" && v.copies[6].dst == 2 * 24 + 12));
}

TEST_CASE("replicas that would be stored more often than the split tensors are big keep tp 1") {
  auto md = one_tensor({4, 2}, {{{0, 0}, {2, 2}}, {{2, 0}, {2, 2}}});
  formats::DcpItem big;
  big.fqn = "big";
  big.dtype = ptc::DType::F32;
  big.size = {100};
  big.chunks = {chunk({0}, {100}, "__0_0.distcp", 1000, 528)};
  md.items.push_back(big);
  auto save = plan_dcp_save(md, record, "j/1");
  REQUIRE(save.is_ok());
  CHECK(save->ptc.parallelism == ptc::Parallelism{1, 1, 1});
  CHECK(save->ptc.find("v")->tp_dim == 0);  // still split when a later layout asks for it
}

TEST_CASE("a chunk saved from a view (not in C order) is gathered: its record's strides, from its storage") {
  auto transposed = [](const formats::DcpItem& t, const formats::DcpChunk& c) {
    auto r = record(t, c);
    if (t.fqn == "w") r->stride = {1, 4};  // a [3, 4] tensor's .t()
    r->storage_offset = 2;
    return r;
  };
  auto save = plan_dcp_save(metadata(), transposed, "j/1");
  REQUIRE(save.is_ok());
  for (int t = 0; t < 2; ++t) {
    const auto& w = file_of(*save, "w", t);
    CHECK(w.copies.empty());
    REQUIRE(w.gathers.size() == 1);
    const auto& g = w.gathers[0];
    CHECK(g.file == (t == 0 ? "__0_0.distcp" : "__1_0.distcp"));
    CHECK(g.src == (t == 0 ? 1600u : 0u) + 128 + 2 * 4);
    CHECK(g.span == (3 * 1 + 2 * 4 + 1) * 4);  // to element (3, 2) of a [4, 3] chunk with strides (1, 4)
    CHECK(g.offsets == ptc::Shape{0, 3 * t});
    CHECK(g.sizes == ptc::Shape{4, 3});
    CHECK(g.stride == ptc::Shape{1, 4});
    CHECK(g.region == g.frame);  // the whole chunk, into a slice that is exactly it
  }
  CHECK(save->bytes == 96 + 2 * (4 + 700));
}

TEST_CASE("a chunk that cannot be gathered, or a record that contradicts the metadata, is refused naming the chunk") {
  SECTION("strides of a view, over more than 1 GiB") {
    auto transposed = [](const formats::DcpItem& t, const formats::DcpChunk& c) {
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
    auto other = [](const formats::DcpItem& t, const formats::DcpChunk& c) {
      auto r = record(t, c);
      r->dtype = ptc::DType::BF16;
      return r;
    };
    auto save = plan_dcp_save(metadata(), other, "j/1");
    REQUIRE(!save.is_ok());
    CHECK_THAT(save.status().message(), Catch::Contains("holds BF16 where the metadata says F32"));
  }
  SECTION("another shape") {
    auto other = [](const formats::DcpItem& t, const formats::DcpChunk& c) {
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

TEST_CASE("a layout whose files would hold more than twice the save's bytes keeps tp 1") {
  // 1024 one-element chunks ask for tp 1024, where a 100 kB bytes item would be written 1024 times.
  std::vector<std::pair<ptc::Shape, ptc::Shape>> boxes;
  for (int64_t i = 0; i < 1024; ++i) boxes.push_back({{i}, {1}});
  auto md = one_tensor({1024}, boxes);
  formats::DcpItem blob;
  blob.fqn = "blob";
  blob.bytes = true;
  blob.chunks = {chunk({}, {}, "__0_0.distcp", 200, 100000)};
  md.items.push_back(blob);
  auto save = plan_dcp_save(md, record, "j/1");
  REQUIRE(save.is_ok());
  CHECK(save->ptc.parallelism == ptc::Parallelism{1, 1, 1});
  CHECK(save->ptc.find("v")->tp_dim == 0);
  // Without the bytes item the same chunks are the step's slices.
  md.items.pop_back();
  auto alone = plan_dcp_save(md, record, "j/1");
  REQUIRE(alone.is_ok());
  CHECK(alone->ptc.parallelism == ptc::Parallelism{1024, 1, 1});
}

TEST_CASE("each shard of a save across nodes is held by the node whose files hold the most of its bytes") {
  DcpSave save;
  save.ptc.parallelism = ptc::Parallelism{3, 1, 1};
  auto file = [](const std::string& name, int shard, std::vector<DcpCopy> copies, std::vector<DcpGather> gathers = {}) {
    DcpTensorFile f;
    f.name = name;
    f.shard = shard;
    f.copies = std::move(copies);
    f.gathers = std::move(gathers);
    return f;
  };
  DcpGather g;
  g.file = "__2_0.distcp";
  g.span = 900;
  save.files = {// shard 0: its rank's rows, and a replicated tensor rank 2 wrote
                file("w", 0, {{"__0_0.distcp", 0, 0, 1000}}), file("norm", 0, {{"__2_0.distcp", 0, 0, 200}}),
                // shard 1: rank 1's rows weigh less than what rank 2 wrote for it: n2 holds it
                file("w", 1, {{"__1_0.distcp", 0, 0, 100}}), file("norm", 1, {{"__2_0.distcp", 0, 0, 200}}),
                // shard 2: a gather from rank 2's file, equal to rank 0's copy: the first node by name
                file("w", 2, {{"__0_0.distcp", 0, 0, 900}}, {g})};
  const std::map<std::string, std::string> nodes = {
      {"__0_0.distcp", "n0"}, {"__1_0.distcp", "n1"}, {"__2_0.distcp", "n2"}};
  CHECK(dcp_shard_holders(save, nodes, "n1") == std::vector<std::string>{"n0", "n2", "n0"});
  // A shard no file's bytes go to (padding, ptcfs's own bytes) stays with the fallback.
  save.ptc.parallelism = ptc::Parallelism{4, 1, 1};
  CHECK(dcp_shard_holders(save, nodes, "n1") == std::vector<std::string>{"n0", "n2", "n0", "n1"});
}
