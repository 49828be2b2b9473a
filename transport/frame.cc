#include "transport/frame.h"

#include <charconv>
#include <cstring>

#include "ptc/base/endian.h"

namespace ptcfs::transport {
namespace {
constexpr char kMagic[4] = {'P', 'T', 'C', 'F'};

}  // namespace

std::array<uint8_t, kHeaderSize> encode_header(const FrameHeader& h) {
  std::array<uint8_t, kHeaderSize> b{};
  std::memcpy(b.data(), kMagic, 4);
  store_le<uint16_t>(b.data() + 4, h.version);
  store_le<uint16_t>(b.data() + 6, static_cast<uint16_t>(h.type));
  store_le<uint32_t>(b.data() + 8, h.length);
  store_le<uint32_t>(b.data() + 12, h.request_id);
  return b;
}

Result<FrameHeader> decode_header(const uint8_t* p, uint32_t max_body) {
  if (std::memcmp(p, kMagic, 4) != 0) return invalid("not a ptcfs frame (bad magic)");
  FrameHeader h;
  h.version = load_le<uint16_t>(p + 4);
  if (h.version != kProtocolVersion)
    return invalid("protocol version " + std::to_string(h.version) + " not supported (this build speaks " +
                   std::to_string(kProtocolVersion) + ")");
  const uint16_t type = load_le<uint16_t>(p + 6);
  if (type < 1 || type > kMaxFrameType) return invalid("unknown frame type " + std::to_string(type));
  h.type = static_cast<FrameType>(type);
  h.length = load_le<uint32_t>(p + 8);
  if (h.length > max_body)
    return error(Code::kResourceExhausted,
                 "frame of " + std::to_string(h.length) + " bytes exceeds the limit of " + std::to_string(max_body));
  h.request_id = load_le<uint32_t>(p + 12);
  return h;
}

std::string encode_frame(FrameType type, uint32_t request_id, const std::string& body) {
  FrameHeader h;
  h.type = type;
  h.length = static_cast<uint32_t>(body.size());
  h.request_id = request_id;
  const auto hb = encode_header(h);
  std::string out(reinterpret_cast<const char*>(hb.data()), hb.size());
  out += body;
  return out;
}

std::string encode_data_head(uint32_t request_id, const std::string& json_body, uint64_t payload_size) {
  FrameHeader h;
  h.type = FrameType::kData;
  h.request_id = request_id;
  h.length = static_cast<uint32_t>(4 + json_body.size() + payload_size);
  const auto hb = encode_header(h);
  std::string out(reinterpret_cast<const char*>(hb.data()), hb.size());
  uint8_t lb[4];
  store_le<uint32_t>(lb, static_cast<uint32_t>(json_body.size()));
  out.append(reinterpret_cast<const char*>(lb), 4);
  out += json_body;
  return out;
}

Result<uint32_t> decode_data_json_length(const uint8_t* p, uint32_t body_length) {
  if (body_length < 4) return corrupt("truncated data frame");
  const uint32_t n = load_le<uint32_t>(p);
  if (n > body_length - 4) return corrupt("malformed data frame: its JSON is longer than the frame");
  return n;
}

Status parse_address(const std::string& addr, std::string& host, uint16_t& port) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    return invalid("address '" + addr + "': expected HOST:PORT");
  host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string p = addr.substr(colon + 1);
  unsigned v = 0;
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (ec != std::errc() || ptr != p.data() + p.size() || v > 65535)
    return invalid("address '" + addr + "': bad port '" + p + "'");
  port = static_cast<uint16_t>(v);
  return Status::ok();
}

}  // namespace ptcfs::transport
