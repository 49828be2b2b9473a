// The torch.save archives and the DCP .metadata written for the DCP view (ptc/formats/
// torch_archive.h, ptc/formats/dcp_metadata.h), checked as bytes here; tests/python/
// test_dcp_view.py loads them with torch itself.
#include "ptc/formats/torch_archive.h"

#include <catch2/catch.hpp>

#include <string>

#include "ptc/base/endian.h"
#include "ptc/formats/dcp_metadata.h"
#include "ptc/formats/pickle_writer.h"

using namespace ptcfs;
using namespace ptcfs::ptc;
using namespace ptcfs::formats;

TEST_CASE("crc32 is ZIP's CRC-32") {
  const std::string check = "123456789";
  CHECK(crc32(check.data(), check.size()) == 0xCBF43926u);
  CHECK(crc32("", 0) == 0u);
}

TEST_CASE("pickled integers take the shortest of protocol 2's forms") {
  PickleWriter w;
  w.integer(7);
  w.integer(300);
  w.integer(-1);
  w.integer(int64_t{1} << 40);
  CHECK(w.finish() ==
        std::string("\x80\x02K\x07M\x2c\x01J\xff\xff\xff\xff\x8a\x08\x00\x00\x00\x00\x00\x01\x00\x00.", 23));
}

TEST_CASE("a tensor's archive aligns its data and ends in ZIP64 end records pointing at its directory") {
  const TorchArchive a = torch_tensor_archive(DType::BF16, {3, 5});
  CHECK(a.data_bytes == 30);
  CHECK(a.head.size() % 64 == 0);  // the data record's bytes start 64-byte aligned
  CHECK(a.head.find("torch._utils\n_rebuild_tensor_v3\n") != std::string::npos);
  CHECK(a.head.find("torch\nbfloat16\n") != std::string::npos);
  REQUIRE(a.tail.size() > 22 + 20 + 56);
  const char* eocd = a.tail.data() + a.tail.size() - 22;
  CHECK(load_le<uint32_t>(eocd) == 0x06054b50u);
  CHECK(load_le<uint16_t>(eocd + 10) == 4);                   // records
  CHECK(load_le<uint32_t>(eocd + 16) == a.head.size() + 30);  // the directory follows the data
  const char* locator = eocd - 20;
  CHECK(load_le<uint32_t>(locator) == 0x07064b50u);
  CHECK(load_le<uint64_t>(locator + 8) == a.size() - 22 - 20 - 56);  // where the ZIP64 record is
  CHECK(load_le<uint32_t>(a.tail.data()) == 0x02014b50u);            // the directory's first entry
}

TEST_CASE("a data record of 4 GiB or more is described in ZIP64 fields") {
  const TorchArchive a = torch_tensor_archive(DType::F32, {int64_t{1} << 30, 2});
  CHECK(a.data_bytes == uint64_t{8} << 30);
  CHECK(a.head.size() % 64 == 0);
  const char* eocd = a.tail.data() + a.tail.size() - 22;
  CHECK(load_le<uint32_t>(eocd + 16) == 0xFFFFFFFFu);  // the directory's offset is past 4 GiB
  const char* z64 = a.tail.data() + a.tail.size() - 22 - 20 - 56;
  CHECK(load_le<uint32_t>(z64) == 0x06064b50u);
  CHECK(load_le<uint64_t>(z64 + 48) == a.head.size() + a.data_bytes);
}

TEST_CASE("the DCP metadata names every item's class, its chunks and where each lies") {
  DcpItem t{"w",
            false,
            DType::F16,
            {4, 6},
            {{{0, 0}, {4, 3}, "tp0-pp0.distcp", 0, 900}, {{0, 3}, {4, 3}, "tp1-pp0.distcp", 0, 900}}};
  DcpItem b{"step", true, DType::U8, {}, {{{}, {}, "tp0-pp0.distcp", 900, 17}}};
  const std::string m = dcp_metadata({t, b});
  for (const char* s :
       {"torch.distributed.checkpoint.metadata\nMetadata\n", "\nTensorStorageMetadata\n", "\nBytesStorageMetadata\n",
        "\nChunkStorageMetadata\n", "\nMetadataIndex\n", "torch.distributed.checkpoint.filesystem\n_StorageInfo\n",
        "torch\nfloat16\n", "tp1-pp0.distcp", "1.0.0"})
    CHECK(m.find(s) != std::string::npos);
  CHECK(m.back() == '.');
}
