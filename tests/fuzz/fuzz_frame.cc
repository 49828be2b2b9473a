// Bytes a control or peer connection receives: a frame header, then its body as the server
// and the client read it (a request's JSON; a data frame's JSON length and JSON).
#include "ptc/base/json_util.h"
#include "tests/fuzz/fuzz_util.h"
#include "transport/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptcfs::transport;
  if (size < kHeaderSize) return 0;
  auto h = decode_header(data, 1 << 20);
  if (!h) return 0;
  const size_t have = size - kHeaderSize;
  const size_t body = std::min<size_t>(h->length, have);
  const uint8_t* p = data + kHeaderSize;
  if (h->type == FrameType::kData) {
    if (body < 4) return 0;
    auto n = decode_data_json_length(p, h->length);
    if (!n) return 0;
    if (*n > h->length - 4) __builtin_trap();  // the JSON lies inside the frame
    (void)ptcfs::parse_json_lenient(ptcfs::fuzz::view(p + 4, std::min<size_t>(*n, body - 4)));
    return 0;
  }
  auto j = ptcfs::parse_json(ptcfs::fuzz::view(p, body), "request");
  if (j && j->is_object()) (void)ptcfs::member_string_or(*j, "op", "");
  return 0;
}
