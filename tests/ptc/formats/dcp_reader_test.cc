// Reading what stock torch.distributed.checkpoint writes (ptc/formats/dcp_reader.h,
// ptc/formats/torch_item.h): the real files of tests/fixtures/dcp/ (written by stock torch,
// make_fixtures.py) against what torch itself read from them (expected.json), then hostile
// variants of them.
#include "ptc/formats/dcp_reader.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "ptc/base/endian.h"
#include "ptc/formats/dcp_metadata.h"
#include "ptc/formats/pickle_writer.h"
#include "ptc/formats/torch_archive.h"
#include "ptc/formats/torch_item.h"

using namespace ptcfs;
using namespace ptcfs::ptc;
using namespace ptcfs::formats;
using json = nlohmann::json;

namespace {

const std::string kFixtures = PTCFS_TEST_FIXTURES "/dcp/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string hex(std::string_view b) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

// Reads of [off, off + len) of `bytes`, as the daemon would read an item of a .distcp file.
ReadAt reader_of(const std::string& bytes) {
  return [&bytes](uint64_t off, uint64_t len) -> Result<std::string> {
    if (off > bytes.size() || len > bytes.size() - off) return corrupt("read past the end");
    return bytes.substr(off, len);
  };
}

Result<TorchTensorItem> read_item(const std::string& item) {
  return read_torch_tensor_item(item.size(), reader_of(item), "item");
}

std::string refusal(const Status& s, Code code) {
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.code() == code);
  return s.message();
}
template <class T>
std::string refusal(const Result<T>& r, Code code) {
  return refusal(r.status(), code);
}

Shape shape_of(const json& j) { return j.get<Shape>(); }

// Checks one fixture folder against its expected.json: the items, planner_data, references,
// and every tensor chunk's archive down to its data bytes.
void check_case(const std::string& name) {
  const std::string dir = kFixtures + name + "/";
  const json want = json::parse(read_file(dir + "expected.json"));
  const auto md = parse_dcp_metadata(read_file(dir + ".metadata"), name + "/.metadata");
  REQUIRE(md.is_ok());
  REQUIRE(md->items.size() == want["items"].size());
  for (size_t i = 0; i < md->items.size(); ++i) {
    const DcpItem& it = md->items[i];
    const json& w = want["items"][i];
    INFO(it.fqn);
    CHECK(it.fqn == w["fqn"].get<std::string>());
    CHECK(it.bytes == w["bytes"].get<bool>());
    if (!it.bytes) {
      CHECK(torch_dtype_name(it.dtype) == w["dtype"].get<std::string>());
      CHECK(it.size == shape_of(w["size"]));
    }
    REQUIRE(it.chunks.size() == w["chunks"].size());
    for (size_t k = 0; k < it.chunks.size(); ++k) {
      const DcpChunk& c = it.chunks[k];
      const json& wc = w["chunks"][k];
      CHECK(c.file == wc["file"].get<std::string>());
      CHECK(c.offset == wc["offset"].get<uint64_t>());
      CHECK(c.length == wc["length"].get<uint64_t>());
      if (it.bytes) continue;
      CHECK(c.offsets == shape_of(wc["offsets"]));
      CHECK(c.sizes == shape_of(wc["sizes"]));

      const std::string file = read_file(dir + c.file);
      REQUIRE(c.offset + c.length <= file.size());
      const std::string item = file.substr(c.offset, c.length);
      const auto t = read_item(item);
      REQUIRE(t.is_ok());
      const json& a = wc["archive"];
      CHECK(torch_dtype_name(t->dtype) == a["dtype"].get<std::string>());
      CHECK(t->dtype == it.dtype);
      CHECK(t->shape == shape_of(a["shape"]));
      CHECK(t->shape == c.sizes);
      CHECK(t->stride == shape_of(a["stride"]));
      CHECK(t->storage_offset == a["storage_offset"].get<uint64_t>());
      CHECK(t->data_offset == a["data_offset"].get<uint64_t>());
      CHECK(t->data_length == a["data_length"].get<uint64_t>());
      CHECK(hex(item.substr(t->data_offset, t->data_length)) == a["storage_hex"].get<std::string>());
    }
  }
  std::vector<std::pair<std::string, std::vector<DcpPathElement>>> planner;
  for (const auto& [key, path] : want["planner_data"].items()) {
    std::vector<DcpPathElement> p;
    for (const json& e : path) {
      if (e.is_string()) {
        p.emplace_back(e.get<std::string>());
      } else {
        p.emplace_back(e.get<int64_t>());
      }
    }
    planner.emplace_back(key, std::move(p));
  }
  CHECK(md->planner_data == planner);
  std::map<std::string, uint64_t> sizes = want["file_sizes"].get<std::map<std::string, uint64_t>>();
  CHECK(check_dcp_references(*md, sizes, name).is_ok());
}

// A tensor of 2 x 3 float32 in one chunk, and a bytes item, as ptcfs's own writer lays them out.
std::vector<DcpItem> two_items() {
  DcpItem t;
  t.fqn = "w";
  t.dtype = DType::F32;
  t.size = {2, 3};
  t.chunks.push_back({{0, 0}, {2, 3}, "__0_0.distcp", 100, 1577});
  DcpItem b;
  b.fqn = "step";
  b.bytes = true;
  b.chunks.push_back({{}, {}, "__0_0.distcp", 0, 100});
  return {b, t};
}

std::string metadata_of_chunks(const Shape& size, const std::vector<std::pair<Shape, Shape>>& chunks,
                               DType dtype = DType::F32) {
  DcpItem t;
  t.fqn = "w";
  t.dtype = dtype;
  t.size = size;
  uint64_t at = 0;
  for (const auto& [off, sz] : chunks) {
    t.chunks.push_back({off, sz, "__0_0.distcp", at, 10});
    at += 10;
  }
  return dcp_metadata({t});
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

// A ZIP of stored records without data descriptors or ZIP64 records (the end records a writer
// of small archives may use), each record's data at a 64-byte boundary as torch aligns them.
std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out, dir;
  const auto put16 = [](std::string& s, uint16_t v) {
    char b[2];
    store_le<uint16_t>(b, v);
    s.append(b, 2);
  };
  const auto put32 = [](std::string& s, uint32_t v) {
    char b[4];
    store_le<uint32_t>(b, v);
    s.append(b, 4);
  };
  for (const auto& [name, body] : records) {
    const auto offset = static_cast<uint32_t>(out.size());
    const size_t pad = (64 - (out.size() + 30 + name.size() + 4) % 64) % 64;
    const uint32_t crc = crc32(body.data(), body.size());
    for (std::string* s : {&out, &dir}) {
      put32(*s, s == &out ? 0x04034b50 : 0x02014b50);
      if (s == &dir) put16(*s, 20);
      put16(*s, 20);
      put16(*s, 0);  // flags
      put16(*s, 0);  // stored
      put32(*s, 0);  // time, date
      put32(*s, crc);
      put32(*s, static_cast<uint32_t>(body.size()));
      put32(*s, static_cast<uint32_t>(body.size()));
      put16(*s, static_cast<uint16_t>(name.size()));
      put16(*s, static_cast<uint16_t>(s == &out ? pad + 4 : 0));
      if (s == &dir) {
        put16(*s, 0);  // comment, disk, attributes
        put16(*s, 0);
        put16(*s, 0);
        put32(*s, 0);
        put32(*s, offset);
      }
      *s += name;
    }
    put16(out, 0x4246);
    put16(out, static_cast<uint16_t>(pad));
    out.append(pad, 'Z');
    out += body;
  }
  const auto cd = static_cast<uint32_t>(out.size());
  out += dir;
  put32(out, 0x06054b50);
  put32(out, 0);
  put16(out, static_cast<uint16_t>(records.size()));
  put16(out, static_cast<uint16_t>(records.size()));
  put32(out, static_cast<uint32_t>(dir.size()));
  put32(out, cd);
  put16(out, 0);
  return out;
}

// A data.pkl as torch 2.x writes one for a tensor of a typed storage (_rebuild_tensor_v2).
struct Rebuild {
  std::string storage = "FloatStorage";
  int64_t numel = 6, offset = 0;
  std::vector<int64_t> size{2, 3}, stride{3, 1};
  bool second_storage = false;
};
std::string data_pkl(const Rebuild& r) {
  PickleWriter w;
  w.global("torch._utils", "_rebuild_tensor_v2");
  w.mark();
  for (int s = 0; s < (r.second_storage ? 2 : 1); ++s) {
    w.mark();
    w.str("storage");
    w.global("torch", r.storage);
    w.str(std::to_string(s));
    w.str("cpu");
    w.integer(r.numel);
    w.tuple();
    w.persid();
  }
  if (!r.second_storage) w.integer(r.offset);
  w.int_tuple(r.size);
  w.int_tuple(r.stride);
  w.boolean(false);
  w.global("collections", "OrderedDict");
  w.empty_tuple();
  w.reduce();
  w.tuple();
  w.reduce();
  return w.finish();
}
std::string tensor_zip(const std::string& pkl, size_t data_bytes) {
  return stored_zip({{"archive/data.pkl", pkl}, {"archive/data/0", std::string(data_bytes, '\x07')}});
}

}  // namespace

TEST_CASE("a stock one-process dcp.save reads as torch read it: items, chunks, planner_data, data", "[dcp_reader]") {
  check_case("single");
}

TEST_CASE("a stock two-rank dcp.save reads as torch read it: uneven DTensor shards, an empty one", "[dcp_reader]") {
  check_case("sharded2");
  const auto md = parse_dcp_metadata(read_file(kFixtures + "sharded2/.metadata"), "sharded2");
  REQUIRE(md.is_ok());
  const DcpItem& a = md->items[0];
  REQUIRE(a.fqn == "a");
  REQUIRE(a.chunks.size() == 2);
  CHECK(a.chunks[0].sizes == Shape{3, 2});
  CHECK(a.chunks[1].offsets == Shape{3, 0});
  CHECK(a.chunks[1].file == "__1_0.distcp");
  const DcpItem& one = md->items[1];
  CHECK(one.chunks[1].offsets == Shape{1});  // an empty shard starts at the dim's size
  CHECK(one.chunks[1].sizes == Shape{0});
}

TEST_CASE("ptcfs's own .metadata and tensor archives read back as written", "[dcp_reader]") {
  const auto md = parse_dcp_metadata(dcp_metadata(two_items()), "own");
  REQUIRE(md.is_ok());
  REQUIRE(md->items.size() == 2);
  CHECK(md->items[0].fqn == "step");
  CHECK(md->items[0].bytes);
  CHECK(md->items[0].chunks[0].length == 100);
  CHECK(md->items[1].fqn == "w");
  CHECK(md->items[1].size == Shape{2, 3});
  CHECK(md->items[1].chunks[0].offsets == Shape{0, 0});
  CHECK(md->items[1].chunks[0].offset == 100);
  CHECK(md->planner_data.empty());

  for (DType dt : {DType::BF16, DType::F8_E4M3, DType::U32}) {
    const TorchArchive a = torch_tensor_archive(dt, {3, 5});
    const std::string item = a.head + std::string(a.data_bytes, '\x01') + a.tail;
    const auto t = read_item(item);
    REQUIRE(t.is_ok());
    CHECK(t->dtype == dt);
    CHECK(t->shape == Shape{3, 5});
    CHECK(t->stride == Shape{5, 1});
    CHECK(t->data_offset == a.head.size());
    CHECK(t->data_length == a.data_bytes);
  }
}

TEST_CASE("a .metadata naming a global off the allow list is refused naming it", "[dcp_reader]") {
  const std::string own = dcp_metadata(two_items());
  CHECK(refusal(parse_dcp_metadata(replaced(own, "builtins\ngetattr\n", "os\nsystem\n"), "m"),
                Code::kInvalidArgument) == "m: global os.system is not allowed in a DCP .metadata");
  CHECK(refusal(parse_dcp_metadata(replaced(own, "torch.distributed.checkpoint.metadata\nStorageMeta\n",
                                            "torch.distributed.checkpoint.planner\nSavePlan\n"),
                                   "m"),
                Code::kInvalidArgument)
            .find("torch.distributed.checkpoint.planner.SavePlan") != std::string::npos);
  CHECK(
      refusal(parse_dcp_metadata(replaced(own, "torch\nfloat32\n", "torch\ncomplex64\n"), "m"), Code::kInvalidArgument)
          .find("torch.complex64") != std::string::npos);
  // In stock torch's own file: getattr becomes compile (same length, so its frame still holds).
  const std::string real = read_file(kFixtures + "single/.metadata");
  CHECK(refusal(parse_dcp_metadata(replaced(real, "\x8c\x07getattr",
                                            "\x8c\x07"
                                            "compile"),
                                   "m"),
                Code::kInvalidArgument)
            .find("builtins.compile") != std::string::npos);
  // getattr on anything but the memory-format enum, and a layout other than strided.
  CHECK(refusal(parse_dcp_metadata(replaced(real, "\x8c\x14_MEM_FORMAT_ENCODING",
                                            "\x8c\x14"
                                            "ChunkStorageMetadata"),
                                   "m"),
                Code::kInvalidArgument) == "m: builtins.getattr is allowed only on _MEM_FORMAT_ENCODING");
  CHECK(refusal(parse_dcp_metadata(replaced(real, "torch.strided", "torch.sparse_"), "m"), Code::kInvalidArgument) ==
        "m: only the layout 'torch.strided' is supported");
}

TEST_CASE("chunks that overlap, leave a hole or lie outside their tensor are refused naming the tensor",
          "[dcp_reader]") {
  CHECK(parse_dcp_metadata(metadata_of_chunks({4, 3}, {{{0, 0}, {2, 3}}, {{2, 0}, {2, 1}}, {{2, 1}, {2, 2}}}), "m")
            .is_ok());
  CHECK(refusal(parse_dcp_metadata(metadata_of_chunks({2, 3}, {{{0, 0}, {2, 3}}, {{1, 1}, {1, 2}}}), "m"),
                Code::kCorrupt) ==
        "m: chunks 0 (offsets [0, 0], sizes [2, 3]) and 1 (offsets [1, 1], sizes [1, 2]) of 'w' overlap at [1, 1]");
  CHECK(refusal(parse_dcp_metadata(metadata_of_chunks({2, 3}, {{{0, 0}, {1, 3}}, {{1, 0}, {1, 2}}}), "m"),
                Code::kCorrupt) == "m: no chunk of 'w' [2, 3] holds the element at [1, 2]");
  CHECK(refusal(parse_dcp_metadata(metadata_of_chunks({2, 3}, {{{0, 0}, {1, 3}}, {{1, 0}, {2, 3}}}), "m"),
                Code::kCorrupt) == "m: chunk 1 (offsets [1, 0], sizes [2, 3]) of 'w' lies outside [2, 3]");
  CHECK(
      refusal(parse_dcp_metadata(metadata_of_chunks({2, 3}, {{{0}, {2}}}), "m"), Code::kCorrupt).find("lies outside") !=
      std::string::npos);
  CHECK(refusal(parse_dcp_metadata(metadata_of_chunks({2, 3}, {}), "m"), Code::kCorrupt) == "m: 'w' has no chunks");
  // Empty chunks lie anywhere inside, even at the dim's end, and cover nothing.
  CHECK(parse_dcp_metadata(metadata_of_chunks({2}, {{{0}, {2}}, {{2}, {0}}}), "m").is_ok());
  CHECK(parse_dcp_metadata(metadata_of_chunks({0, 4}, {{{0, 0}, {0, 4}}}), "m").is_ok());
  CHECK(parse_dcp_metadata(metadata_of_chunks({}, {{{}, {}}}), "m").is_ok());  // a scalar
}

TEST_CASE("sizes past 2^63 bytes and more than 64 dims are refused before any arithmetic overflows", "[dcp_reader]") {
  const int64_t big = int64_t{1} << 31;
  CHECK(refusal(parse_dcp_metadata(metadata_of_chunks({big, big}, {{{0, 0}, {big, big}}}), "m"),
                Code::kInvalidArgument) == "m: 'w' [2147483648, 2147483648] of float32 holds 2^63 bytes or more");
  const int64_t max = INT64_MAX;
  CHECK(refusal(parse_dcp_metadata(metadata_of_chunks({max, max, max}, {{{0, 0, 0}, {max, max, max}}}), "m"),
                Code::kInvalidArgument)
            .find("2^63 bytes") != std::string::npos);
  CHECK(refusal(parse_dcp_metadata(metadata_of_chunks({max}, {{{max}, {max}}}, DType::U8), "m"), Code::kCorrupt)
            .find("lies outside") != std::string::npos);
  CHECK(refusal(parse_dcp_metadata(metadata_of_chunks(Shape(65, 1), {{Shape(65, 0), Shape(65, 1)}}), "m"),
                Code::kInvalidArgument)
            .find("65 dims") != std::string::npos);
}

TEST_CASE("storage references must be plain file names, one per chunk, uncompressed", "[dcp_reader]") {
  for (const char* name : {"../x.distcp", "a/b", "", ".."}) {
    std::vector<DcpItem> items = two_items();
    items[1].chunks[0].file = name;
    CHECK(refusal(parse_dcp_metadata(dcp_metadata(items), "m"), Code::kInvalidArgument).find("not a plain file name") !=
          std::string::npos);
  }
  std::vector<DcpItem> items = two_items();
  items[1].chunks[0].file = std::string(256, 'f');
  CHECK_FALSE(parse_dcp_metadata(dcp_metadata(items), "m").is_ok());
  items[1].chunks[0].file = std::string(255, 'f');
  CHECK(parse_dcp_metadata(dcp_metadata(items), "m").is_ok());

  // A chunk without its storage_data entry: the entry's offsets no longer match.
  const std::string own = dcp_metadata(two_items());
  std::string moved = own;
  const size_t md_index = moved.rfind("MetadataIndex");
  REQUIRE(md_index != std::string::npos);
  // The tensor's MetadataIndex offset is torch.Size((0, 0)): make it (0, 1).
  const std::string zero_zero("(K\x00K\x00t", 6);
  const size_t at = moved.find(zero_zero, md_index);
  REQUIRE(at != std::string::npos);
  moved.replace(at, zero_zero.size(), std::string("(K\x00K\x01t", 6));
  CHECK(refusal(parse_dcp_metadata(moved, "m"), Code::kCorrupt) ==
        "m: chunk (offsets [0, 0], sizes [2, 3]) of 'w' has no storage_data entry");

  // transform_descriptors (compressed items) are refused naming them.
  PickleWriter w;
  w.new_object("torch.distributed.checkpoint.metadata", "Metadata");
  w.empty_dict();
  w.mark();
  w.str("state_dict_metadata");
  w.empty_dict();
  w.mark();
  w.str("x");
  w.new_object("torch.distributed.checkpoint.metadata", "BytesStorageMetadata");
  w.setitems();
  w.str("storage_data");
  w.empty_dict();
  w.mark();
  w.new_object("torch.distributed.checkpoint.metadata", "MetadataIndex");
  w.empty_dict();
  w.mark();
  w.str("fqn");
  w.str("x");
  w.setitems();
  w.build();
  w.new_object("torch.distributed.checkpoint.filesystem", "_StorageInfo");
  w.empty_dict();
  w.mark();
  w.str("relative_path");
  w.str("__0_0.distcp");
  w.str("offset");
  w.integer(0);
  w.str("length");
  w.integer(10);
  w.str("transform_descriptors");
  w.empty_list();
  w.mark();
  w.str("stream.zstd/1");
  w.appends();
  w.setitems();
  w.build();
  w.setitems();
  w.setitems();
  w.build();
  CHECK(refusal(parse_dcp_metadata(w.finish(), "m"), Code::kInvalidArgument) ==
        "m: storage_data of 'x': transform_descriptors [stream.zstd/1] not supported");
}

TEST_CASE("references past the end of their file or to a missing file are refused", "[dcp_reader]") {
  const auto md = parse_dcp_metadata(read_file(kFixtures + "sharded2/.metadata"), "sharded2");
  REQUIRE(md.is_ok());
  std::map<std::string, uint64_t> sizes{{"__0_0.distcp", 3154}, {"__1_0.distcp", 4667}};
  CHECK(check_dcp_references(*md, sizes, "d").is_ok());
  sizes["__1_0.distcp"] = 4666;  // the last item is one byte longer than the file
  CHECK(refusal(check_dcp_references(*md, sizes, "d"), Code::kOutOfRange) ==
        "d: chunk (offsets [0], sizes [3]) of 'rep' lies at [3090, +1577) of __1_0.distcp, which holds 4666 bytes");
  sizes.erase("__1_0.distcp");
  CHECK(refusal(check_dcp_references(*md, sizes, "d"), Code::kNotFound).find("__1_0.distcp, which is missing") !=
        std::string::npos);

  DcpMetadata lying;
  lying.items = two_items();
  lying.items[0].chunks[0].offset = UINT64_MAX;  // offset + length wraps
  CHECK(refusal(check_dcp_references(lying, {{"__0_0.distcp", 5000}}, "d"), Code::kOutOfRange)
            .find("bytes item 'step'") != std::string::npos);
}

TEST_CASE("every prefix of a stock .metadata is refused without a crash", "[dcp_reader]") {
  const std::string real = read_file(kFixtures + "single/.metadata");
  for (size_t n = 0; n < real.size(); ++n) {
    CHECK_FALSE(parse_dcp_metadata(real.substr(0, n), "m").is_ok());
  }
}

TEST_CASE("every prefix of a stock tensor item is refused without a crash", "[dcp_reader]") {
  const std::string file = read_file(kFixtures + "single/__0_0.distcp");
  const std::string item = file.substr(3783, 1577);  // 'w', expected.json
  REQUIRE(read_item(item).is_ok());
  for (size_t n = 0; n < item.size(); ++n) {
    const std::string cut = item.substr(0, n);
    CHECK_FALSE(read_item(cut).is_ok());
  }
}

TEST_CASE("a hand-made stored ZIP without ZIP64 records reads; its data.pkl is checked", "[dcp_reader]") {
  const std::string ok = tensor_zip(data_pkl({}), 24);
  const auto t = read_item(ok);
  REQUIRE(t.is_ok());
  CHECK(t->dtype == DType::F32);
  CHECK(t->shape == Shape{2, 3});
  CHECK(t->data_offset % 64 == 0);
  CHECK(t->data_length == 24);
  CHECK(ok.substr(t->data_offset, 24) == std::string(24, '\x07'));

  Rebuild two;
  two.second_storage = true;
  CHECK(refusal(read_item(tensor_zip(data_pkl(two), 24)), Code::kInvalidArgument) ==
        "item: data.pkl holds 2 storages, not one");
  Rebuild neg;
  neg.stride = {3, -1};
  CHECK(refusal(read_item(tensor_zip(data_pkl(neg), 24)), Code::kCorrupt).find("the stride holds int -1") !=
        std::string::npos);
  Rebuild shifted;
  shifted.offset = 1;  // 6 elements from offset 1 need 7 of the 6 stored
  CHECK(refusal(read_item(tensor_zip(data_pkl(shifted), 24)), Code::kCorrupt).find("runs past its storage of 24") !=
        std::string::npos);
  Rebuild strided;
  strided.stride = {4, 1};  // spans 8 elements
  CHECK_FALSE(read_item(tensor_zip(data_pkl(strided), 24)).is_ok());
  Rebuild deep;
  deep.size = std::vector<int64_t>(65, 1);
  deep.stride = std::vector<int64_t>(65, 1);
  deep.numel = 1;
  CHECK(refusal(read_item(tensor_zip(data_pkl(deep), 4)), Code::kCorrupt).find("more than 64 dims") !=
        std::string::npos);
  CHECK(refusal(read_item(tensor_zip(data_pkl({}), 20)), Code::kCorrupt).find("holds 20 bytes, its storage 24") !=
        std::string::npos);
  Rebuild complex;
  complex.storage = "ComplexFloatStorage";
  CHECK(
      refusal(read_item(tensor_zip(data_pkl(complex), 48)), Code::kInvalidArgument).find("torch.ComplexFloatStorage") !=
      std::string::npos);

  PickleWriter evil;
  evil.global("os", "system");
  evil.mark();
  evil.str("true");
  evil.tuple();
  evil.reduce();
  CHECK(refusal(read_item(tensor_zip(evil.finish(), 0)), Code::kInvalidArgument).find("os.system") !=
        std::string::npos);
  PickleWriter dict;
  dict.empty_dict();
  CHECK(refusal(read_item(tensor_zip(dict.finish(), 0)), Code::kInvalidArgument).find("holds 0 storages") !=
        std::string::npos);

  std::string compressed = ok;  // method 8 (deflate) in both headers of data.pkl
  compressed[8] = 8;
  compressed[compressed.find("PK\x01\x02") + 10] = 8;
  CHECK(refusal(read_item(compressed), Code::kInvalidArgument).find("compressed (method 8)") != std::string::npos);
  CHECK(refusal(read_item(stored_zip({{"archive/data.pkl", data_pkl({})},
                                      {"archive/byteorder", "big"},
                                      {"archive/data/0", std::string(24, '\0')}})),
                Code::kInvalidArgument) == "item: the tensor is stored big-endian, not little-endian");
  CHECK(read_item(stored_zip({{"archive/data.pkl", data_pkl({})},
                              {"archive/byteorder", "little"},
                              {"archive/data/0", std::string(24, '\0')}}))
            .is_ok());
  CHECK(refusal(read_item(stored_zip({{"archive/data/0", "x"}})), Code::kCorrupt).find("no <prefix>/data.pkl") !=
        std::string::npos);
  CHECK(refusal(read_item(stored_zip({{"archive/data.pkl", data_pkl({})}})), Code::kCorrupt)
            .find("no storage record archive/data/0") != std::string::npos);
}
