// ReadLeases (daemon/cluster/read_leases.h): a version a peer read is held for the grace after
// its last read, and let go after it, so that the store's weak copy then goes too.
#include "daemon/cluster/read_leases.h"

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "ptc/model.h"

using namespace ptcfs;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<const StepVersion> version(uint64_t v) {
  auto p = ptc::parse_ptc_json(R"({"parallelism": {"tp": 1, "pp": 1, "dp": 1}, "num_layers": 1, "tensors": {
    "w": {"dtype": "F32", "shape": [2], "tp_dim": 0, "layer": 0}}})",
                               "ptc.json");
  REQUIRE(p.is_ok());
  auto layout = ptc::Layout::make(*p, p->parallelism);
  REQUIRE(layout.is_ok());
  return std::make_shared<const StepVersion>("j", "s", v, 0, *layout, std::vector<std::vector<StoredSlice>>(1),
                                             nullptr);
}

}  // namespace

TEST_CASE("a version peers read is held for the grace after its last read, then let go", "[read_leases]") {
  ReadLeases leases(60s);
  const auto t0 = ReadLeases::Clock::time_point{} + 1000s;
  auto v1 = version(1), v2 = version(2);
  std::weak_ptr<const StepVersion> w1 = v1, w2 = v2;
  leases.touch(v1, t0);
  leases.touch(v2, t0);
  leases.touch(v1, t0 + 50s);  // read again: held 60 s from now on
  v1.reset();
  v2.reset();
  CHECK(leases.expire(t0 + 59s) == 2);
  CHECK(!w1.expired());
  CHECK(leases.expire(t0 + 60s) == 1);  // v2 not read for 60 s
  CHECK(w2.expired());
  CHECK(!w1.expired());
  CHECK(leases.expire(t0 + 110s) == 0);
  CHECK(w1.expired());
  CHECK(leases.size() == 0);
  leases.touch(nullptr, t0);
  CHECK(leases.size() == 0);
}

TEST_CASE("a version just replaced is held for its own while, longer when peers read it", "[read_leases]") {
  ReadLeases leases(60s);
  const auto t0 = ReadLeases::Clock::time_point{} + 1000s;
  auto v1 = version(1), v2 = version(2);
  std::weak_ptr<const StepVersion> w1 = v1, w2 = v2;
  leases.hold(v1, 10s, t0);
  leases.hold(v2, 10s, t0);
  leases.touch(v2, t0 + 5s);      // read by a peer: held 60 s from then
  leases.hold(v2, 10s, t0 + 6s);  // a shorter hold does not cut the read's lease short
  v1.reset();
  v2.reset();
  CHECK(leases.expire(t0 + 9s) == 2);
  CHECK(leases.expire(t0 + 10s) == 1);
  CHECK(w1.expired());
  CHECK(!w2.expired());
  CHECK(leases.expire(t0 + 64s) == 1);
  CHECK(leases.expire(t0 + 65s) == 0);
  CHECK(w2.expired());
}
