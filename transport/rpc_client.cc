#include <utility>  // Boost 1.74's awaitable.hpp needs std::exchange declared first
#include <boost/asio.hpp>

#include "transport/auth.h"
#include "transport/frame.h"
#include "transport/rpc.h"

namespace ptcfs::transport {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using nlohmann::json;

constexpr uint32_t kMaxResponse = 256 << 20;

class SyncClient final : public RpcClient {
 public:
  SyncClient(std::string addr, std::string secret)
      : addr_(std::move(addr)), secret_(std::move(secret)), socket_(io_) {}

  ptc::Status connect() {
    std::string host;
    uint16_t port = 0;
    PTC_RETURN_IF_ERROR(parse_address(addr_, host, port));
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto eps = resolver.resolve(host, std::to_string(port), ec);
    if (ec) return ptc::error(ptc::Code::kUnavailable, "cannot resolve " + addr_ + ": " + ec.message());
    asio::connect(socket_, eps, ec);
    if (ec)
      return ptc::error(ptc::Code::kUnavailable, "cannot reach the daemon at " + addr_ + ": " + ec.message() +
                                                     " (is ptcfsd running? set --daemon or PTCFS_DAEMON)");
    socket_.set_option(tcp::no_delay(true), ec);
    return handshake();
  }

  // The server speaks first (transport/auth.h).
  ptc::Status handshake() {
    PTC_ASSIGN_OR_RETURN(auto hello, read_frame());
    if (hello.type != FrameType::kHello) return ptc::corrupt("daemon at " + addr_ + " did not say hello");
    const std::string auth = hello.body.value("auth", "");
    if (auth == "none") return ptc::Status::ok();
    if (auth != "hmac-sha256")
      return ptc::corrupt("daemon at " + addr_ + " asks for unknown authentication '" + auth + "'");
    if (secret_.empty())
      return ptc::error(ptc::Code::kPermissionDenied,
                        "the daemon at " + addr_ + " requires the cluster secret (give --secret-file or set PTCFS_SECRET_FILE)");
    const std::string ns = hello.body.value("nonce", ""), nc = make_nonce();
    const json req = {{"nonce", nc}, {"proof", auth_proof(secret_, Role::kClient, nc, ns)}};
    boost::system::error_code ec;
    asio::write(socket_, asio::buffer(encode_frame(FrameType::kAuth, 0, req.dump())), ec);
    if (ec) return lost(ec);
    PTC_ASSIGN_OR_RETURN(auto reply, read_frame());
    if (reply.type == FrameType::kResponse) return error_of(reply.body);
    if (reply.type != FrameType::kAuthOk) return ptc::corrupt("daemon at " + addr_ + " sent an unexpected frame");
    if (!proof_matches(reply.body.value("proof", ""), auth_proof(secret_, Role::kServer, ns, nc)))
      return ptc::error(ptc::Code::kPermissionDenied, "the daemon at " + addr_ + " does not hold the cluster secret");
    return ptc::Status::ok();
  }

  struct Frame {
    FrameType type;
    uint32_t id;
    json body;
  };

  // Reads one frame; a data frame's bytes go to `data` (refused when there is none or
  // they exceed max_data).
  ptc::Result<Frame> read_frame(std::string* data = nullptr, uint64_t max_data = 0) {
    boost::system::error_code ec;
    uint8_t hb[kHeaderSize];
    asio::read(socket_, asio::buffer(hb), ec);
    if (ec) return lost(ec);
    PTC_ASSIGN_OR_RETURN(FrameHeader h, decode_header(hb, kMaxResponse));
    uint32_t json_len = h.length;
    if (h.type == FrameType::kData) {
      uint8_t lb[4];
      if (h.length < 4) return ptc::corrupt("daemon at " + addr_ + " sent a truncated data frame");
      asio::read(socket_, asio::buffer(lb), ec);
      if (ec) return lost(ec);
      json_len = static_cast<uint32_t>(lb[0] | lb[1] << 8 | lb[2] << 16 | static_cast<uint32_t>(lb[3]) << 24);
      if (json_len > h.length - 4) return ptc::corrupt("daemon at " + addr_ + " sent a malformed data frame");
      const uint64_t n = h.length - 4 - json_len;
      if (!data || n > max_data)
        return ptc::corrupt("daemon at " + addr_ + " sent " + std::to_string(n) + " bytes where at most " +
                            std::to_string(data ? max_data : 0) + " were asked for");
    }
    std::string body(json_len, '\0');
    asio::read(socket_, asio::buffer(body), ec);
    if (ec) return lost(ec);
    if (data && h.type != FrameType::kData) data->clear();
    if (h.type == FrameType::kData) {
      data->resize(h.length - 4 - json_len);
      asio::read(socket_, asio::buffer(*data), ec);
      if (ec) return lost(ec);
      h.type = FrameType::kResponse;
    }
    auto j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return ptc::corrupt("daemon at " + addr_ + " sent malformed JSON");
    return Frame{h.type, h.request_id, std::move(j)};
  }

  static ptc::Status error_of(const json& j) {
    const json err = j.value("error", json::object());
    return ptc::Status(ptc::code_from_name(err.value("code", "internal")), err.value("message", "unknown error"));
  }

  ptc::Result<json> call(const json& request, const ProgressSink& progress) override {
    return exchange(request, progress, nullptr, 0);
  }

  ptc::Result<json> call_data(const json& request, std::string& out, uint64_t max_bytes) override {
    // `out` keeps its size from the last call: resizing it to the same size writes nothing,
    // where clearing it first would zero-fill every chunk (16 MiB) before reading into it.
    return exchange(request, {}, &out, max_bytes);
  }

  ptc::Result<json> exchange(const json& request, const ProgressSink& progress, std::string* data, uint64_t max_data) {
    const uint32_t id = ++next_id_;
    const std::string frame = encode_frame(FrameType::kRequest, id, request.dump());
    boost::system::error_code ec;
    asio::write(socket_, asio::buffer(frame), ec);
    if (ec) return lost(ec);
    while (true) {
      auto f = read_frame(data, max_data);
      if (!f) return f.status();
      auto& [type, rid, j] = *f;
      if (type == FrameType::kProgress) {
        if (progress) progress(j);
        continue;
      }
      if (type != FrameType::kResponse || rid != id) return ptc::corrupt("daemon at " + addr_ + " sent an unexpected frame");
      if (j.value("ok", false)) return j.contains("result") ? j["result"] : json::object();
      return error_of(j);
    }
  }

 private:
  ptc::Status lost(const boost::system::error_code& ec) {
    return ptc::error(ptc::Code::kUnavailable, "connection to the daemon at " + addr_ + " lost: " + ec.message());
  }

  std::string addr_;
  std::string secret_;
  asio::io_context io_;
  tcp::socket socket_;
  uint32_t next_id_ = 0;
};

}  // namespace

ptc::Result<std::unique_ptr<RpcClient>> RpcClient::connect(const std::string& addr, const std::string& secret) {
  auto c = std::make_unique<SyncClient>(addr, secret);
  PTC_RETURN_IF_ERROR(c->connect());
  return std::unique_ptr<RpcClient>(std::move(c));
}

}  // namespace ptcfs::transport
