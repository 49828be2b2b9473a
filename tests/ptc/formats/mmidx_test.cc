#include "ptc/formats/mmidx.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace ptcfs;
using namespace ptcfs::formats;

TEST_CASE("MMIDIDX indexes round-trip and malformed ones are refused with the reason", "[dataset]") {
  const std::string idx = render_mmidx(4, {8, 0, 12});  // int32: 2, 0 and 3 elements
  REQUIRE(idx.size() == mmidx_size(3));
  auto m = parse_mmidx(idx, 20, "a.idx");
  REQUIRE(m.is_ok());
  CHECK(m->dtype_code == 4);
  CHECK(m->offsets == std::vector<uint64_t>{0, 8, 8});
  CHECK(m->bytes == std::vector<uint64_t>{8, 0, 12});
  CHECK(m->documents == 3);

  auto err = [&](std::string bytes, uint64_t bin) { return parse_mmidx(bytes, bin, "a.idx").status(); };
  CHECK(err(idx, 19).message().find("sequence 2 (bytes [8, 20)) lies past the end of the .bin file (19 bytes)") !=
        std::string::npos);
  std::string bad = idx;
  bad[0] = 'X';
  CHECK(err(bad, 20).message() == "a.idx: not an MMIDIDX index (bad magic)");
  bad = idx;
  bad[17] = 9;
  CHECK(err(bad, 20).message() == "a.idx: unknown dtype code 9");
  CHECK(err(idx.substr(0, idx.size() - 1), 20).code() == Code::kCorrupt);
  CHECK(err(idx + "x", 20).message().find("does not match") != std::string::npos);
  CHECK(err(idx.substr(0, 20), 20).message() == "a.idx: shorter than the 34-byte MMIDIDX header");
  bad = idx;
  bad[34] = '\xff';  // length of sequence 0 becomes negative
  bad[35] = '\xff';
  bad[36] = '\xff';
  bad[37] = '\xff';
  CHECK(err(bad, 20).message() == "a.idx: sequence 0 has a negative length -1");
}
