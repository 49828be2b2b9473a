// etcd's JSON gateway replies (transport/etcd_reply.h): a watch stream fed in two chunks, a
// key-value, an error body. None may throw; a decoded key-value's key and value are what base64 gave.
#include <functional>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include "transport/etcd_reply.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = ptcfs::fuzz::view(data, size);
  const std::string prefix = "/ptcfs/";
  size_t events = 0;
  const std::function<void(const ptcfs::transport::EtcdEvent&)> on_event = [&](const ptcfs::transport::EtcdEvent& e) {
    ++events;
    if (e.kv.key.size() > size) __builtin_trap();  // decoded base64 is never longer than its text
  };
  ptcfs::transport::WatchLines lines(prefix, on_event);
  lines.feed(text.substr(0, size / 2));
  lines.feed(text.substr(size / 2));
  lines.finish();
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (auto kv = ptcfs::transport::kv_from(j); kv && ptcfs::transport::b64(kv->key).size() > size) __builtin_trap();
  (void)ptcfs::transport::etcd_error(std::string(text), 500);
  (void)ptcfs::transport::str_of(j, "message");
  (void)ptcfs::transport::i64(j, "revision");
  return 0;
}
