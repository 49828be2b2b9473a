// Frames: the unit of every ptcfs connection (CLI to daemon, daemon to daemon).
//
//   offset 0  4 bytes  magic "PTCF"
//          4  u16 LE   protocol version (kProtocolVersion)
//          6  u16 LE   frame type
//          8  u32 LE   body length (at most the receiver's limit)
//         12  u32 LE   request id (a response or progress frame repeats its request's id)
//         16  body
//
// Control frames carry JSON bodies. A receiver refuses a wrong magic, an unknown version
// and a body longer than its limit, and closes the connection.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "ptc/base/status.h"

namespace ptcfs::transport {

inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHeaderSize = 16;

enum class FrameType : uint16_t {
  kRequest = 1,    // JSON {"op": ..., ...}
  kResponse = 2,   // JSON {"ok": true, "result": ...} or {"ok": false, "error": {"code", "message"}}
  kProgress = 3,   // JSON, any number before the response
  kHello = 4,      // server -> client, first frame: {"auth": "none"} or {"auth": "hmac-sha256", "nonce": hex}
  kAuth = 5,       // client -> server: {"nonce": hex, "proof": hex}
  kAuthOk = 6,     // server -> client: {"proof": hex}
  kData = 7,       // a response with bytes: u32 LE JSON length, the JSON response, the bytes
  kKeepalive = 8,  // server -> client, empty: the request is still running (sent every
                   // ServerLimits::keepalive_ms while it works), so a client can tell a slow
                   // request from a peer that stopped answering
};
inline constexpr uint16_t kMaxFrameType = 8;

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  FrameType type = FrameType::kRequest;
  uint32_t length = 0;
  uint32_t request_id = 0;
};

std::array<uint8_t, kHeaderSize> encode_header(const FrameHeader& h);
// Checks magic, version, type and length <= max_body; kInvalidArgument or
// kResourceExhausted with a message saying which.
Result<FrameHeader> decode_header(const uint8_t* p, uint32_t max_body);

// A whole frame (header + body) as bytes.
std::string encode_frame(FrameType type, uint32_t request_id, const std::string& body);

// A data frame without its payload: the header (body length 4 + JSON + payload_size), the
// u32 LE JSON length and the JSON. The payload's bytes follow on the wire.
std::string encode_data_head(uint32_t request_id, const std::string& json_body, uint64_t payload_size);
// The JSON length of a data frame from its first 4 body bytes, checked against the body
// length from its header; kCorrupt when it does not fit.
Result<uint32_t> decode_data_json_length(const uint8_t* p, uint32_t body_length);

// Parses "HOST:PORT" (HOST may be a name or an IPv4 address, or [IPv6]).
Status parse_address(const std::string& addr, std::string& host, uint16_t& port);

}  // namespace ptcfs::transport
