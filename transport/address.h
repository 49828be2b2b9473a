// Resolving the "HOST:PORT" addresses of the RPC client and server (transport/rpc.h).
#pragma once

#include <utility>  // Boost 1.74's awaitable.hpp needs std::exchange declared first
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <string>

#include "ptc/base/status.h"

namespace ptcfs::transport {

// The endpoints of "HOST:PORT" (parse_address in transport/frame.h), looked up with `io`'s
// resolver; never empty. kInvalidArgument for a malformed address, kUnavailable, naming the
// address, when it resolves to nothing.
Result<boost::asio::ip::tcp::resolver::results_type> resolve(boost::asio::io_context& io, const std::string& addr);

}  // namespace ptcfs::transport
