// JSON a node takes from its peers and from etcd: every request, reply and record reader, and what the
// etcd watch does with a record (EtcdMembership::apply, then Coordinator::on_record): decode it
// by its key (a node's registration, a step's or a dataset's record) and read the fields the
// handler acts on. An input that starts with "/ptcfs/" is a key, a newline, then the value, as
// the watch delivers them; any other input is the value of a record under each kind of key.
#include <cstdlib>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/changes/change_kinds.h"
#include "daemon/cluster/dcp_save_ops.h"
#include "daemon/cluster/etcd_record.h"
#include "ptc/base/json_util.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace ptcfs;

// What the watch does with (key, text): a record that decodes must encode back to the same
// record (the codec loses nothing it accepted); one that does not is skipped.
void watch(const std::string& key, std::string_view text) {
  const auto value = parse_json_lenient(text);
  const std::string nodes = "/ptcfs/nodes/";
  if (key.rfind(nodes, 0) == 0) {
    const std::string id = key.substr(nodes.size());
    auto n = node_record_from_json(value, id);
    if (!n) return;
    auto back = node_record_from_json(to_json(*n), id);
    if (!back || to_json(*back) != to_json(*n)) std::abort();
    return;
  }
  auto r = keyed_record(key, value);
  if (!r) return;
  // Coordinator::on_record: the transaction it commits, the version it catches up to, a removal.
  (void)r->tx().size();
  (void)r->version();
  (void)r->removed();
  const nlohmann::json again = std::visit([](const auto& v) { return to_json(v); }, r->value);
  auto back = keyed_record(key, again);
  if (!back || back->is_step() != r->is_step() || back->job != r->job || back->name != r->name ||
      std::visit([](const auto& v) { return to_json(v); }, back->value) != again)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = fuzz::view(data, size);
  if (in.rfind("/ptcfs/", 0) == 0) {
    const size_t nl = in.find('\n');
    if (nl == std::string_view::npos) return 0;
    watch(std::string(in.substr(0, nl)), in.substr(nl + 1));
    return 0;
  }
  for (const char* key : {"/ptcfs/steps/j/1", "/ptcfs/datasets/j/d", "/ptcfs/nodes/n0"}) watch(key, in);
  const auto j = parse_json_lenient(in);
  if (j.is_discarded()) return 0;
  (void)prepare_request_from_json(j);
  (void)prepare_reply_from_json(j, "reply");
  (void)step_state_from_json(j, "reply");
  (void)dataset_state_from_json(j, "reply");
  (void)save_state_from_json(j, "reply");
  (void)peer_stats_from_json(j, "reply");
  (void)dcp_files_reply_from_json(j, "reply");
  // Every peer request the peer service decodes: one that decodes encodes back to itself.
  auto again = [](const auto& r, auto decode) {
    if (!r) return;
    auto back = decode(to_json(*r));
    if (!back || to_json(*back) != to_json(*r)) std::abort();
  };
  again(state_request_from_json(j), state_request_from_json);
  again(finish_request_from_json(j, true), [](const nlohmann::json& x) { return finish_request_from_json(x, true); });
  again(finish_request_from_json(j, false), [](const nlohmann::json& x) { return finish_request_from_json(x, false); });
  again(save_state_request_from_json(j), save_state_request_from_json);
  again(save_ready_request_from_json(j), save_ready_request_from_json);
  again(dataset_state_request_from_json(j), dataset_state_request_from_json);
  again(stats_request_from_json(j), stats_request_from_json);
  again(dataset_table_request_from_json(j), dataset_table_request_from_json);
  again(samples_request_from_json(j), samples_request_from_json);
  again(read_request_from_json(j), read_request_from_json);
  again(dcp_files_request_from_json(j), dcp_files_request_from_json);
  again(dcp_read_request_from_json(j), dcp_read_request_from_json);
  again(dcp_convert_request_from_json(j), dcp_convert_request_from_json);
  return 0;
}
