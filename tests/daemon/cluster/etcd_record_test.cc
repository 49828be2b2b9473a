// The records ptcfs keeps in etcd (daemon/cluster/etcd_record.h): what every writer of this
// code puts there decodes to the same struct and encodes back to the same JSON, and whatever
// else a key holds is refused, naming the key and the member at fault, without throwing.
#include "daemon/cluster/etcd_record.h"

#include <catch2/catch.hpp>

#include "daemon/cluster/membership.h"
#include "ptc/base/json_util.h"

using namespace ptcfs;
using nlohmann::json;

namespace {

std::string refusal(const std::string& key, const std::string& text) {
  auto r = keyed_record(key, parse_json_lenient(text));
  REQUIRE_FALSE(r.is_ok());
  return r.status().to_string();
}

}  // namespace

TEST_CASE("every step record the coordinator writes decodes and encodes back unchanged") {
  const char* texts[] = {
      R"({"kind":"import","version":1,"nodes":["n0","n1"],"gpus":[2,2],"tx":"ab12","coordinator":"n1"})",
      R"({"kind":"repartition","version":7,"parallelism":"tp=2,pp=1,dp=3","nodes":["n0","n1","n2"],"gpus":[2,2,2],"tx":"cd34","coordinator":"n2"})",
      R"({"kind":"save","version":1,"holders":[["n0"],["n0","n1"]],"tx":"ef56","coordinator":"n0"})",
      R"({"kind":"remove","removed":true,"tx":"0a0b","coordinator":"n0"})",
      R"({"removed":true,"fenced":"0c0d"})",
      R"({"kind":"repartition","version":2,"parallelism":"tp=1,pp=2,dp=1","nodes":["n0"],"gpus":[2],"tx":"1","coordinator":"n0","fenced":"2"})",
  };
  for (const char* text : texts) {
    INFO(text);
    const json j = json::parse(text);
    auto r = keyed_record("/ptcfs/steps/gpt/100", j);
    REQUIRE(r.is_ok());
    CHECK(r->is_step());
    CHECK(r->job == "gpt");
    CHECK(r->name == "100");
    CHECK(to_json(std::get<StepRecord>(r->value)) == j);
  }
  auto r = keyed_record("/ptcfs/steps/gpt/100", json::parse(texts[1]));
  REQUIRE(r.is_ok());
  CHECK(r->tx() == "cd34");
  CHECK(r->version() == 7);
  CHECK_FALSE(r->removed());
  const auto& s = std::get<StepRecord>(r->value);
  CHECK(s.nodes == std::vector<std::string>{"n0", "n1", "n2"});
  CHECK(s.gpus == std::vector<int>{2, 2, 2});
  CHECK(s.parallelism == "tp=2,pp=1,dp=3");
  CHECK(s.coordinator == "n2");
}

TEST_CASE("dataset records decode by their key and encode back unchanged") {
  const char* texts[] = {
      R"({"kind":"dataset_add","tx":"ab","coordinator":"n0"})",
      R"({"kind":"dataset_progress","version":3,"tx":"cd","coordinator":"n1"})",
      R"({"removed":true,"fenced":"ef"})",
  };
  for (const char* text : texts) {
    INFO(text);
    const json j = json::parse(text);
    auto r = keyed_record("/ptcfs/datasets/gpt/web", j);
    REQUIRE(r.is_ok());
    CHECK_FALSE(r->is_step());
    CHECK(r->job == "gpt");
    CHECK(r->name == "web");
    CHECK(to_json(std::get<DatasetRecord>(r->value)) == j);
  }
  CHECK(keyed_record("/ptcfs/datasets/gpt/web", json::parse(texts[1]))->version() == 3);
}

TEST_CASE("malformed step and dataset records are refused naming the key and the member") {
  const std::string k = "/ptcfs/steps/j/1";
  CHECK(refusal(k, R"({"tx": 5})") == "invalid_argument: etcd key /ptcfs/steps/j/1 lacks 'kind'");
  CHECK(refusal(k, R"({"kind": "repartition", "version": 2, "tx": 5})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1 field 'tx' must be a string");
  CHECK(refusal(k, R"({"kind": "repartition", "version": "2"})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1 field 'version' must be a non-negative integer");
  CHECK(refusal(k, R"({"kind": "repartition", "version": -1})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1 field 'version' must be a non-negative integer");
  CHECK(refusal(k, R"({"kind": "repartition"})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1 lacks 'version' (at least 1)");
  CHECK(refusal(k, R"({"kind": "repartition", "version": 2, "removed": "yes"})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1 field 'removed' must be true or false");
  CHECK(refusal(k, R"({"kind": "remove"})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1: 'removed' must be true exactly for a removal");
  CHECK(refusal(k, R"({"kind": "grow", "version": 2})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1: unknown kind 'grow'");
  CHECK(refusal(k, R"({"kind": "import", "version": 1, "nodes": ["n0"], "gpus": [2, 2]})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1: 'gpus' must give one count per node of 'nodes'");
  CHECK(refusal(k, R"({"kind": "import", "version": 1, "nodes": "n0"})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1 field 'nodes' must be a list of strings");
  CHECK(refusal(k, R"({"kind": "import", "version": 1, "gpus": [0]})")
            .rfind("invalid_argument: etcd key /ptcfs/steps/j/1 field 'gpus'", 0) == 0);
  CHECK(refusal(k, R"({"kind": "save", "version": 1, "holders": [["n0"], 3]})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1 field 'holders' must be a list of lists of strings");
  CHECK(refusal(k, R"({"kind": "repartition", "version": 2, "parallelism": "tp=0"})")
            .rfind("invalid_argument: etcd key /ptcfs/steps/j/1 field 'parallelism': ", 0) == 0);
  CHECK(refusal(k, R"({"kind": "repartition", "version": 2, "extra": 1})") ==
        "invalid_argument: etcd key /ptcfs/steps/j/1: unknown key 'extra' (allowed: kind, version, tx, coordinator, "
        "nodes, gpus, parallelism, holders, removed, fenced)");
  CHECK(refusal(k, "[1, 2]") == "invalid_argument: etcd key /ptcfs/steps/j/1: expected a JSON object");
  CHECK(refusal(k, "not json") == "invalid_argument: etcd key /ptcfs/steps/j/1: expected a JSON object");
  const std::string d = "/ptcfs/datasets/j/web";
  CHECK(refusal(d, R"({"kind": "dataset_progress", "tx": "a"})") ==
        "invalid_argument: etcd key /ptcfs/datasets/j/web lacks 'version' (at least 1)");
  CHECK(refusal(d, R"({"kind": "dataset_add", "removed": true})") ==
        "invalid_argument: etcd key /ptcfs/datasets/j/web: 'removed' is only a fence's, where there was no record");
  CHECK(refusal(d, R"({"kind": "repartition", "version": 2})") ==
        "invalid_argument: etcd key /ptcfs/datasets/j/web: unknown kind 'repartition'");
}

TEST_CASE("keys that name no step or dataset are told apart from malformed records") {
  const json rec = {{"kind", "remove"}, {"removed", true}};
  for (const char* key : {"/ptcfs/nodes/n0", "/ptcfs/locks/steps/j/1", "/ptcfs/steps/j", "/ptcfs/other/j/1", "/x"}) {
    INFO(key);
    auto r = keyed_record(key, rec);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kNotFound);
  }
  // A name no job or step may have: refused, not read as some other step.
  CHECK(refusal("/ptcfs/steps/j/1/x", rec.dump()).rfind("invalid_argument: etcd key /ptcfs/steps/j/1/x: ", 0) == 0);
  CHECK(refusal("/ptcfs/steps/.j/1", rec.dump()).rfind("invalid_argument: etcd key /ptcfs/steps/.j/1: ", 0) == 0);
  std::string job, step;
  REQUIRE(parse_etcd_dataset_key("/ptcfs/datasets/gpt/web", job, step));
  CHECK(job == "gpt");
  CHECK(step == "web");
  CHECK(etcd_dataset_key(job, step) == "/ptcfs/datasets/gpt/web");
}

TEST_CASE("node records: the key's id, an address, and a GPU count ptcfsd accepts") {
  auto ok = node_record_from_json(json::parse(R"({"id":"n1","addr":"10.0.0.2:7070","gpus":8})"), "n1");
  REQUIRE(ok.is_ok());
  CHECK(ok->addr == "10.0.0.2:7070");
  CHECK(ok->gpus == 8);
  CHECK(to_json(*ok) == json::parse(R"({"id":"n1","addr":"10.0.0.2:7070","gpus":8})"));
  CHECK(node_record_from_json(json::parse(R"({"id":"n1","addr":"h:1"})"), "n1")->gpus == 1);
  auto bad = [](const char* text, const std::string& id) {
    auto r = node_record_from_json(parse_json_lenient(text), id);
    REQUIRE_FALSE(r.is_ok());
    return r.status().to_string();
  };
  CHECK(bad(R"({"id":"n1","addr":5})", "n1") ==
        "invalid_argument: etcd record of node n1 field 'addr' must be a string");
  CHECK(bad(R"({"id":"n2","addr":"h:1"})", "n1") == "invalid_argument: etcd record of node n1 names node 'n2'");
  CHECK(bad(R"({"id":"n1","addr":"h:1","gpus":0})", "n1") ==
        "invalid_argument: etcd record of node n1 field 'gpus': 0 is outside [1, 65536]");
  CHECK(bad(R"({"id":"n1","addr":"h:1","gpus":1e3})", "n1") ==
        "invalid_argument: etcd record of node n1 field 'gpus': expected an integer, got 1000.0");
  CHECK(bad(R"({"id":"n1"})", "n1") == "invalid_argument: etcd record of node n1 lacks 'addr'");
  CHECK(bad("{}", "").rfind("invalid_argument: etcd record of node : ", 0) == 0);
}
