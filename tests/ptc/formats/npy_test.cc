#include "ptc/formats/npy.h"

#include <catch2/catch.hpp>

#include <string>

using namespace ptcfs;
using namespace ptcfs::ptc;
using namespace ptcfs::formats;

namespace {

const std::string kFile = "views/layers.0.w.npy";

std::string le16(uint16_t n) { return {static_cast<char>(n & 0xff), static_cast<char>(n >> 8)}; }

// A version 1.0 header around `dict`, padded with spaces and '\n' to `total` bytes.
std::string v1_header(const std::string& dict, size_t total) {
  std::string out = std::string("\x93NUMPY\x01\x00", 8) + le16(static_cast<uint16_t>(total - 10)) + dict;
  out.append(total - 1 - out.size(), ' ');
  return out + "\n";
}

// A version 1.0 header around `dict` as given, unpadded.
std::string raw_v1(const std::string& dict) {
  return std::string("\x93NUMPY\x01\x00", 8) + le16(static_cast<uint16_t>(dict.size())) + dict;
}

Result<NpyHeader> parse_with_data(const std::string& header, uint64_t data) {
  return parse_npy(header, header.size() + data, kFile);
}

void expect_error(const std::string& header, uint64_t data, Code code, const std::string& needle) {
  INFO("header: " << header);
  auto r = parse_with_data(header, data);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == code);
  CHECK_THAT(r.status().message(), Catch::Contains(kFile));
  CHECK_THAT(r.status().message(), Catch::Contains(needle));
}

}  // namespace

TEST_CASE("npy_header is byte-identical to numpy 1.24's numpy.save", "[npy]") {
  // Dicts and total lengths taken from numpy 1.24 format._write_array_header (as np.save
  // calls it). The space padding includes numpy's 21-digit growth room for axis 0.
  struct Case {
    DType dtype;
    Shape shape;
    const char* dict;
    size_t total;
  };
  const Case cases[] = {
      {DType::F32, {3, 4}, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 128},
      {DType::BF16, {}, "{'descr': '<u2', 'fortran_order': False, 'shape': (), }", 128},
      {DType::BOOL, {5}, "{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }", 128},
      {DType::F64, {0}, "{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }", 128},
      {DType::I64, {123456789012, 2}, "{'descr': '<i8', 'fortran_order': False, 'shape': (123456789012, 2), }", 128},
      {DType::F8_E4M3,
       {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13},
       "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13), }",
       128},
      {DType::I16, {INT64_MAX}, "{'descr': '<i2', 'fortran_order': False, 'shape': (9223372036854775807,), }", 128},
      // 10 + dict + growth + '\n' is exactly 128 here: numpy still adds a full 64 bytes.
      {DType::F32,
       {0, 100000, 100000, 1, 12, 12, 6789, 100000},
       "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 100000, 100000, 1, 12, 12, 6789, 100000), }",
       192},
      {DType::F16, Shape(20, 1000),
       "{'descr': '<f2', 'fortran_order': False, 'shape': (1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, "
       "1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000), }",
       256},
  };
  for (const auto& c : cases) {
    INFO(c.dict);
    const std::string h = npy_header(c.dtype, c.shape);
    CHECK(h == v1_header(c.dict, c.total));
  }
}

TEST_CASE("npy_header switches to version 2.0 when the header outgrows a u16", "[npy]") {
  // numpy.lib.format._wrap_header_guess_version of this dict gives 66112 bytes, length 66100.
  const Shape shape(22000, 1);
  const std::string h = npy_header(DType::F32, shape);
  REQUIRE(h.size() == 66112);
  CHECK(h.substr(0, 12) == std::string("\x93NUMPY\x02\x00\x34\x02\x01\x00", 12));
  CHECK(h.back() == '\n');
  auto parsed = parse_npy(h, h.size() + 4, kFile);
  REQUIRE(parsed.is_ok());
  CHECK(parsed->shape == shape);
  CHECK(parsed->data_start == 66112);
}

TEST_CASE("parse_npy reads back what npy_header writes", "[npy]") {
  const std::pair<DType, Shape> cases[] = {{DType::F32, {3, 4}}, {DType::BF16, {}},        {DType::BOOL, {5}},
                                           {DType::F64, {0, 3}}, {DType::I8, {2, 1, 3}},   {DType::U8, {7}},
                                           {DType::I64, {1, 1}}, {DType::F8_E5M2, {4, 4}}, {DType::I32, {2}}};
  for (const auto& [dtype, shape] : cases) {
    INFO(dtype_name(dtype) << " " << shape_string(shape));
    const std::string h = npy_header(dtype, shape);
    CHECK(h.size() % 64 == 0);
    auto r = parse_with_data(h, num_elements(shape) * dtype_size(dtype));
    REQUIRE(r.is_ok());
    CHECK(r->descr == dtype_npy_descr(dtype));
    CHECK_FALSE(r->fortran_order);
    CHECK(r->shape == shape);
    CHECK(r->data_start == h.size());
  }
}

TEST_CASE("parse_npy accepts any dict literal Python would read the same way", "[npy]") {
  auto r = parse_with_data(raw_v1("{\"shape\":(2,3,),\n \"descr\":\"<i4\",'fortran_order':False}\n"), 24);
  REQUIRE(r.is_ok());
  CHECK(r->descr == "<i4");
  CHECK(r->shape == Shape{2, 3});
  CHECK(parse_with_data(raw_v1("{'descr': '>u1', 'fortran_order': False, 'shape': (3,)}"), 3).is_ok());
  CHECK(parse_with_data(raw_v1("{'descr': '<c16', 'fortran_order': False, 'shape': (3,)}"), 48).is_ok());
}

TEST_CASE("parse_npy requires the data area to match shape and dtype exactly", "[npy]") {
  const std::string h = npy_header(DType::F32, {3, 4});
  expect_error(h, 47, Code::kCorrupt, "data area holds 47 bytes but <f4 [3, 4] needs 48");
  expect_error(h, 49, Code::kCorrupt, "data area holds 49 bytes");
  expect_error(raw_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}"), 0, Code::kCorrupt,
               "too large");
}

TEST_CASE("parse_npy refuses Fortran order as unsupported", "[npy]") {
  expect_error(raw_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }"), 48, Code::kInvalidArgument,
               "Fortran order not supported");
}

TEST_CASE("parse_npy refuses a bad preamble", "[npy]") {
  const std::string good = npy_header(DType::U8, {4});
  expect_error("\x93NUMPX" + good.substr(6), 4, Code::kCorrupt, "bad magic");
  expect_error("PK\x03\x04", 0, Code::kCorrupt, "bad magic");
  expect_error(good.substr(0, 7), 0, Code::kCorrupt, "truncated");
  expect_error(good.substr(0, 9), 0, Code::kCorrupt, "truncated");
  std::string v = good;
  v[6] = 4;
  expect_error(v, 4, Code::kCorrupt, "unknown npy version 4.0");
  v[6] = 1;
  v[7] = 1;
  expect_error(v, 4, Code::kCorrupt, "unknown npy version 1.1");
  v[6] = 3;
  v[7] = 0;
  expect_error(v, 4, Code::kInvalidArgument, "version 3.0");
}

TEST_CASE("parse_npy refuses a header cut short", "[npy]") {
  const std::string good = npy_header(DType::U8, {4});
  // The file ends inside the header.
  auto file_short = parse_npy(good.substr(0, 100), 100, kFile);
  REQUIRE_FALSE(file_short.is_ok());
  CHECK(file_short.status().code() == Code::kCorrupt);
  CHECK_THAT(file_short.status().message(), Catch::Contains("truncated") && Catch::Contains("128"));
  // The file is whole but the prefix given is not.
  auto prefix_short = parse_npy(good.substr(0, 100), 132, kFile);
  REQUIRE_FALSE(prefix_short.is_ok());
  CHECK(prefix_short.status().code() == Code::kCorrupt);
  CHECK_THAT(prefix_short.status().message(), Catch::Contains("only 100 given"));
}

TEST_CASE("parse_npy refuses dicts with unknown, missing or duplicate keys", "[npy]") {
  expect_error(raw_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}"), 12, Code::kCorrupt,
               "unknown key 'extra'");
  expect_error(raw_v1("{'descr': '<f4', 'shape': (3,)}"), 12, Code::kCorrupt, "missing key 'fortran_order'");
  expect_error(raw_v1("{'descr': '<f4', 'fortran_order': False}"), 12, Code::kCorrupt, "missing key 'shape'");
  expect_error(raw_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'shape': (3,)}"), 12, Code::kCorrupt,
               "duplicate key 'shape'");
}

TEST_CASE("parse_npy refuses malformed values", "[npy]") {
  auto bad = [](const std::string& dict, const std::string& needle) {
    expect_error(raw_v1(dict), 12, Code::kCorrupt, needle);
  };
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (3)}", "is an int, not a tuple");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': [3]}", "not a tuple");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}", "non-negative");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (03,)}", "leading zero");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (3.0,)}", "expected ',' or ')'");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "too large");
  bad("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", "not True or False");
  bad("{'descr': <f4, 'fortran_order': False, 'shape': (3,)}", "quoted string");
  bad("{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}", "expected ','");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x", "after '}'");
  bad("['descr', '<f4']", "does not start with '{'");
  bad("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", "expected ',' or '}'");
}

TEST_CASE("parse_npy refuses dtypes it cannot map", "[npy]") {
  auto unsupported = [](const std::string& descr, const std::string& needle) {
    expect_error(raw_v1("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (3,)}"), 12,
                 Code::kInvalidArgument, needle);
  };
  unsupported(">f4", "big-endian dtype '>f4' not supported");
  unsupported("<U3", "dtype '<U3' not supported");
  unsupported("|f4", "dtype '|f4' not supported");
  unsupported("<f16", "not supported");
  unsupported("O", "not supported");
  expect_error(raw_v1("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}"), 12, Code::kInvalidArgument,
               "structured");
}
