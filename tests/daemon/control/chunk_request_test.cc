// A repartition asked for by chunks (daemon/control/chunk_request.h): the request's boxes read
// against the step's PTC, the tp they ask for, and what that tp gives each tensor, exactly.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "daemon/control/chunk_request.h"

using namespace ptcfs;
using nlohmann::json;

namespace {

ptc::Ptc step_ptc() {
  auto p = ptc::parse_ptc_json(R"({"parallelism": {"tp": 4, "pp": 1, "dp": 2}, "tensors": {
      "w": {"dtype": "F32", "shape": [10, 6], "tp_dim": 0, "pad_to": 1},
      "n": {"dtype": "F32", "shape": [6]}}})",
                               "ptc.json");
  REQUIRE(p.is_ok());
  return *p;
}

}  // namespace

TEST_CASE("chunks of 3 ranks ask for tp 3, keeping pp and dp; unknown names are counted, not refused") {
  const auto ptc = step_ptc();
  const json chunks = {{"w", {{{0, 0}, {4, 6}}, {{4, 0}, {8, 6}}, {{8, 0}, {10, 6}}}},
                       {"n", {{{0}, {6}}, {{0}, {6}}}},
                       {"new.param", {{{0}, {3}}}}};
  auto req = parse_chunk_request(chunks, ptc);
  REQUIRE(req.is_ok());
  CHECK(req->tensors == 2);
  CHECK(req->unknown == 1);
  CHECK(parallelism_for(*req, ptc, {4, 1, 2}) == ptc::Parallelism{3, 1, 2});
  CHECK(chunk_match(*req, ptc, 3) ==
        json{{"tensors", 2}, {"unknown", 1}, {"exact", 2}, {"bytes", 264}, {"bytes_exact", 264}});
  // At tp 4 the rows of w are 3, 3, 3, 1: not the ranks' boxes.
  CHECK(chunk_match(*req, ptc, 4)["exact"] == 1);
}

TEST_CASE("chunks no tp makes slices leave the step's tp as it is") {
  const auto ptc = step_ptc();
  // w as a 2 x 2 grid: no split of its rows is these boxes; n whole.
  const json chunks = {{"w", {{{0, 0}, {5, 3}}, {{0, 3}, {5, 6}}, {{5, 0}, {10, 3}}, {{5, 3}, {10, 6}}}},
                       {"n", {{{0}, {6}}}}};
  auto req = parse_chunk_request(chunks, ptc);
  REQUIRE(req.is_ok());
  CHECK(parallelism_for(*req, ptc, {4, 1, 2}) == ptc::Parallelism{4, 1, 2});
  // One rank holding everything: tp 1 is what it asks for.
  auto one = parse_chunk_request(json{{"w", {{{0, 0}, {10, 6}}}}}, ptc);
  REQUIRE(one.is_ok());
  CHECK(parallelism_for(*one, ptc, {4, 1, 2}) == ptc::Parallelism{1, 1, 2});
}

TEST_CASE("a box of another rank or outside its tensor is refused naming the tensor") {
  const auto ptc = step_ptc();
  auto bad = [&](const json& chunks) {
    auto r = parse_chunk_request(chunks, ptc);
    REQUIRE(!r.is_ok());
    return r.status().message();
  };
  CHECK_THAT(bad({{"w", {{{0}, {4}}}}}), Catch::Contains("chunks of 'w': expected 2 integers"));
  CHECK_THAT(bad({{"w", {{{0, 0}, {11, 6}}}}}), Catch::Contains("outside the tensor's shape [10, 6]"));
  CHECK_THAT(bad({{"w", {{{4, 0}, {2, 6}}}}}), Catch::Contains("is not a box"));
  CHECK_THAT(bad(json::parse(R"({"w": [[[0, 0], [4, 6], [8, 6]]]})")),
             Catch::Contains("expected a list of [lo, hi] boxes"));
  CHECK_THAT(bad(json::parse(R"({"w": 3})")), Catch::Contains("expected a list of [lo, hi] boxes"));
  CHECK_THAT(bad(json::array()), Catch::Contains("chunks must be an object"));
}
