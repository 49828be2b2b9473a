// etcd records for the follower's tests, decoded as the watch decodes them.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "daemon/cluster/etcd_record.h"
#include "daemon/cluster/membership.h"

namespace ptcfs::testing {

// The record of job/step at `version` (a repartition), or its removal, written by transaction
// `tx` ("t<version>" where empty).
inline KeyedRecord step_record_of(const std::string& job, const std::string& step, uint64_t version,
                                  bool removed = false, const std::string& tx = "") {
  StepRecord r;
  r.kind = removed ? "remove" : "repartition";
  r.version = removed ? 0 : version;
  r.tx = tx.empty() ? "t" + std::to_string(version) : tx;
  r.coordinator = "n1";
  r.removed = removed;
  auto k = keyed_record(etcd_step_key(job, step), to_json(r));
  REQUIRE(k.is_ok());
  return *k;
}

}  // namespace ptcfs::testing
