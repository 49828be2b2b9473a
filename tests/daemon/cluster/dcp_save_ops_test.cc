// The peer operations of a DCP save across nodes (daemon/cluster/dcp_save_ops.h): what one
// node sends decodes to the same request on the other, and malformed or oversized requests are
// refused with their reason.
#include "daemon/cluster/dcp_save_ops.h"

#include <catch2/catch.hpp>

using namespace ptcfs;
using nlohmann::json;

TEST_CASE("a DCP conversion request reaches the other node as it was sent") {
  DcpConvertRequest r;
  r.job = "j";
  r.step = "7";
  r.from = "n0";
  r.metadata_size = 1234;
  r.files = {{"__0_0.distcp", "n0"}, {"__1_0.distcp", "n1"}};
  r.shards = {"n0", "n1", "n1"};
  const json j = to_json(r);
  CHECK(j.at("op") == "peer.dcp_convert");
  auto back = dcp_convert_request_from_json(j);
  INFO(back.status().to_string());
  REQUIRE(back.is_ok());
  CHECK((back->job == "j" && back->step == "7" && back->from == "n0" && back->metadata_size == 1234));
  CHECK(back->files == r.files);
  CHECK(back->shards == r.shards);

  CHECK_FALSE(j.contains("failed"));
  r.failed = "the save failed on node n0: no __2_0.distcp";
  auto notice = dcp_convert_request_from_json(to_json(r));
  REQUIRE(notice.is_ok());
  CHECK(notice->failed == r.failed);

  json bad = j;
  bad["metadata_size"] = kMaxDcpMetadata + 1;
  CHECK(dcp_convert_request_from_json(bad).status().message().find("metadata_size") != std::string::npos);
  bad = j;
  bad["files"] = json::array();
  CHECK(dcp_convert_request_from_json(bad).status().message().find("'files' must be an object") != std::string::npos);
  bad = j;
  bad["files"]["__2_0.distcp"] = 3;
  CHECK_FALSE(dcp_convert_request_from_json(bad).is_ok());
  bad = j;
  bad["extra"] = 1;
  CHECK_FALSE(dcp_convert_request_from_json(bad).is_ok());
}

TEST_CASE("the staged files of a node go and come back, pending or not") {
  auto req = dcp_files_request_from_json(to_json(DcpFilesRequest{"j", "1"}));
  REQUIRE(req.is_ok());
  CHECK((req->job == "j" && req->step == "1"));

  DcpFilesReply r;
  r.pending = true;
  r.files = {{"__1_0.distcp", 4096}, {"__1_1.distcp", 0}};
  auto back = dcp_files_reply_from_json(to_json(r), "reply");
  REQUIRE(back.is_ok());
  CHECK(back->pending);
  CHECK(back->files == r.files);

  auto none = dcp_files_reply_from_json(json{{"pending", false}}, "reply");
  REQUIRE(none.is_ok());
  CHECK((!none->pending && none->files.empty()));
  CHECK_FALSE(dcp_files_reply_from_json(json{{"pending", true}, {"files", {{"a", -1}}}}, "reply").is_ok());
}

TEST_CASE("a staged read asks at most the transport's reply limit") {
  DcpReadRequest r{"j", "1", "__0_0.distcp", 10, kMaxDcpRead};
  auto back = dcp_read_request_from_json(to_json(r));
  REQUIRE(back.is_ok());
  CHECK((back->file == "__0_0.distcp" && back->off == 10 && back->n == kMaxDcpRead));
  r.n = kMaxDcpRead + 1;
  auto over = dcp_read_request_from_json(to_json(r));
  REQUIRE_FALSE(over.is_ok());
  CHECK(over.status().code() == Code::kResourceExhausted);
}
