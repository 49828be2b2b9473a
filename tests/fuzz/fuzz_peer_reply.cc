// JSON a node takes from its peers and from etcd: every reply and record reader.
#include "daemon/cluster/change_record.h"
#include "ptc/json_util.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptcfs;
  const auto j = ptc::parse_json_lenient(fuzz::view(data, size));
  if (j.is_discarded()) return 0;
  (void)prepare_request_from_json(j);
  (void)prepare_reply_from_json(j, "reply");
  (void)step_state_from_json(j, "reply");
  (void)dataset_state_from_json(j, "reply");
  (void)save_state_from_json(j, "reply");
  (void)peer_stats_from_json(j, "reply");
  return 0;
}
