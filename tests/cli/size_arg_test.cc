#include "cli/size_arg.h"

#include <catch2/catch.hpp>

using ptcfs::cli::parse_size;

TEST_CASE("sizes: ptcfs's own units, Hugging Face's forms and binary units, case ignored", "[size]") {
  CHECK(*parse_size("100kB") == 100'000);  // how ptcfs prints sizes
  CHECK(*parse_size("100.0 kB") == 100'000);
  CHECK(*parse_size("100KB") == 100'000);
  CHECK(*parse_size("5GB") == 5'000'000'000);
  CHECK(*parse_size("5gb") == 5'000'000'000);
  CHECK(*parse_size("1.5 GB") == 1'500'000'000);
  CHECK(*parse_size("500MB") == 500'000'000);
  CHECK(*parse_size("2TB") == 2'000'000'000'000);
  CHECK(*parse_size("2GiB") == 2ull << 30);
  CHECK(*parse_size("2gib") == 2ull << 30);
  CHECK(*parse_size("3KiB") == 3 * 1024);
  CHECK(*parse_size("3MIB") == 3ull << 20);
  CHECK(*parse_size("1TiB") == 1ull << 40);
  CHECK(*parse_size("1048576") == 1048576);
  CHECK(*parse_size("7b") == 7);
  CHECK(*parse_size("0.5KiB") == 512);
}

TEST_CASE("sizes: what is not a size is refused, saying why", "[size]") {
  for (const char* bad : {"", "GB", "5 apples", "5  GB", "5GB ", " 5GB", "5.GB", ".5GB", "5,0GB", "-5GB", "5e9", "5 ",
                          "5KBB", "1234567890123456789"}) {
    auto r = parse_size(bad);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == ptcfs::Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("is not a size"));
  }
  CHECK(parse_size("0GB").status().message() == "the size must be more than 0, got '0GB'");
  CHECK(parse_size("0.1B").status().message() == "'0.1B' is not a whole number of bytes");
  // 10^17 TiB wraps 64 bits: refused, not taken modulo 2^64.
  CHECK(parse_size("100000000000000000TiB").status().message() == "'100000000000000000TiB' is more than 2^63 bytes");
}
