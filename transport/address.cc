#include "transport/address.h"

#include "transport/frame.h"

namespace ptcfs::transport {

using boost::asio::ip::tcp;

Result<tcp::resolver::results_type> resolve(boost::asio::io_context& io, const std::string& addr) {
  std::string host;
  uint16_t port = 0;
  PTC_RETURN_IF_ERROR(parse_address(addr, host, port));
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  auto eps = resolver.resolve(host, std::to_string(port), ec);
  if (ec) return error(Code::kUnavailable, "cannot resolve " + addr + ": " + ec.message());
  if (eps.empty()) return error(Code::kUnavailable, "cannot resolve " + addr + ": no address found");
  return eps;
}

}  // namespace ptcfs::transport
