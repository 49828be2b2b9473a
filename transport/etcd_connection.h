// One HTTP/1.1 connection from transport/etcd_client.cc to one etcd endpoint: plain TCP for
// http:// endpoints, TLS 1.2 over it for https:// ones. With TLS the client checks that etcd's
// certificate is signed by the configured CA and names the endpoint's host, and presents its
// own certificate for etcd's --client-cert-auth (docs/DEPLOY.md "etcd and TLS").
//
// A refused TLS connection is kPermissionDenied with the reason (etcd's certificate did not
// verify, or etcd refused ours), so that a misconfigured node stops at once with a clear error
// instead of retrying as if etcd were down.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ptc/base/status.h"
#include "transport/etcd_client.h"

namespace ptcfs::transport::etcd {

struct Endpoint {
  std::string host, port, text;
  bool tls = false;
};

// Comma-separated http://HOST:PORT or https://HOST:PORT endpoints, all of one scheme
// (kInvalidArgument names a bad one).
Result<std::vector<Endpoint>> parse_endpoints(const std::string& urls);

// The TLS context for https:// endpoints: peers verified against tls.ca_file (the system's
// CAs when empty), this client's certificate and key loaded and matched. kInvalidArgument
// names the file at fault.
Result<std::shared_ptr<boost::asio::ssl::context>> make_tls_context(const EtcdTls& tls);

class Connection {
 public:
  // `tls` is needed for an https:// endpoint and must outlive the connection.
  Connection(boost::asio::io_context& ioc, boost::asio::ssl::context* tls);

  // Connects to `ep` and, with TLS, shakes hands, all within `timeout`: kUnavailable when
  // etcd cannot be reached, kPermissionDenied when the TLS handshake fails.
  Status open(const Endpoint& ep, std::chrono::milliseconds timeout);

  // The TCP layer (timeouts, closing).
  boost::beast::tcp_stream& tcp();
  // Calls f with the stream HTTP is spoken on (the TLS stream or the TCP one).
  template <class F>
  void with(F&& f) {
    if (tls_)
      f(*tls_);
    else
      f(*plain_);
  }

  // The Status of an exchange that failed with `ec` during `what`: kPermissionDenied when
  // the TLS layer failed, else kUnavailable.
  Status failed(const Endpoint& ep, const std::string& what, const boost::beast::error_code& ec) const;

 private:
  static Status refused(const Endpoint& ep, const std::string& what, const boost::beast::error_code& ec);

  boost::asio::io_context& ioc_;
  std::optional<boost::beast::tcp_stream> plain_;
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls_;
};

}  // namespace ptcfs::transport::etcd
