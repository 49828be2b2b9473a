// The DCP view (fs/dcp_views.h) on a node that holds only some shards: a replicated tensor's
// chunk comes from a shard this node holds, so each node's view reads it locally; every node's
// .metadata lists the same chunks.
#include "fs/dcp_views.h"

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>

#include "ptc/formats/dcp_reader.h"
#include "tests/fs/fake_step.h"

using namespace ptcfs;
using namespace ptcfs::fs;
using namespace ptcfs::fs::testing;

namespace {

std::map<std::string, std::shared_ptr<const View>> views_of(const std::shared_ptr<const StepContent>& c) {
  std::map<std::string, std::shared_ptr<const View>> out;
  for (auto& [name, v] : dcp_views(c)) out.emplace(name, v);
  return out;
}

const formats::DcpItem& item(const formats::DcpMetadata& md, const std::string& fqn) {
  for (const auto& it : md.items)
    if (it.fqn == fqn) return it;
  FAIL("no item " << fqn);
  return md.items.front();
}

}  // namespace

TEST_CASE("a replicated tensor's chunk is shown from a shard this node holds") {
  auto all = std::make_shared<FakeStep>(1);
  auto part = std::make_shared<FakeStep>(1);
  part->unavailable = {"tp0-pp1"};  // final_norm (replicated, last stage) is held here by tp1-pp1 only
  auto md_all = formats::parse_dcp_metadata(read_all(*views_of(all).at(".metadata")), "all");
  auto md_part = formats::parse_dcp_metadata(read_all(*views_of(part).at(".metadata")), "part");
  REQUIRE(md_all.is_ok());
  REQUIRE(md_part.is_ok());
  const auto& a = item(*md_all, "final_norm");
  const auto& p = item(*md_part, "final_norm");
  REQUIRE(a.chunks.size() == 1);
  REQUIRE(p.chunks.size() == 1);
  CHECK(a.chunks[0].file == "tp0-pp1.distcp");
  CHECK(p.chunks[0].file == "tp1-pp1.distcp");
  CHECK(a.chunks[0].offsets == p.chunks[0].offsets);
  CHECK(a.chunks[0].sizes == p.chunks[0].sizes);
  // The chunk's data, read from the held shard, is the tensor (the archive's data record ends
  // 12 bytes before its central directory: compare the bytes torch would take).
  const std::string archive =
      read_all(*views_of(part).at("tp1-pp1.distcp")).substr(p.chunks[0].offset, p.chunks[0].length);
  CHECK(archive.find(logical(kFinalNorm)) != std::string::npos);
  // A split tensor still comes from every TP rank's shard.
  CHECK(item(*md_part, "head/bias").chunks.size() == 2);
}
