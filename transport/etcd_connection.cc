#include "transport/etcd_connection.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>

namespace ptcfs::transport::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ssl = boost::asio::ssl;

Result<std::vector<Endpoint>> parse_endpoints(const std::string& urls) {
  std::vector<Endpoint> out;
  size_t at = 0;
  while (at <= urls.size()) {
    size_t comma = urls.find(',', at);
    if (comma == std::string::npos) comma = urls.size();
    const std::string url = urls.substr(at, comma - at);
    at = comma + 1;
    Endpoint ep;
    ep.text = url;
    ep.tls = url.rfind("https://", 0) == 0;
    if (!ep.tls && url.rfind("http://", 0) != 0)
      return invalid("etcd endpoint '" + url + "' must be http://HOST:PORT or https://HOST:PORT");
    std::string hostport = url.substr(ep.tls ? 8 : 7);
    if (!hostport.empty() && hostport.back() == '/') hostport.pop_back();
    const size_t colon = hostport.rfind(':');
    ep.host = colon == std::string::npos ? hostport : hostport.substr(0, colon);
    ep.port = colon == std::string::npos ? "2379" : hostport.substr(colon + 1);
    if (ep.host.empty() || ep.port.empty() || ep.port.find_first_not_of("0123456789") != std::string::npos)
      return invalid("etcd endpoint '" + url + "' must be http://HOST:PORT or https://HOST:PORT");
    // A mix would send the cluster's records in clear to some members.
    if (!out.empty() && out.front().tls != ep.tls)
      return invalid("etcd endpoints '" + urls + "' mix http:// and https://");
    out.push_back(std::move(ep));
  }
  return out;
}

Result<std::shared_ptr<ssl::context>> make_tls_context(const EtcdTls& tls) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  beast::error_code ec;
  // TLS 1.2 only: its handshake ends with etcd's Finished, sent after etcd has checked this
  // client's certificate, so a refusal fails the handshake. Under TLS 1.3 the client's side of
  // the handshake ends first, and the refusal comes after the first request, racing etcd's
  // reset of the connection: the daemon would see "connection reset" and retry as if etcd
  // were down.
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  ctx->set_verify_mode(ssl::verify_peer, ec);
  if (tls.ca_file.empty())
    ctx->set_default_verify_paths(ec);
  else
    ctx->load_verify_file(tls.ca_file, ec);
  if (ec) return invalid("--etcd-ca " + tls.ca_file + ": " + ec.message());
  if (tls.cert_file.empty() != tls.key_file.empty())
    return invalid("--etcd-cert and --etcd-key go together (etcd's client-cert-auth needs both)");
  if (!tls.cert_file.empty()) {
    ctx->use_certificate_chain_file(tls.cert_file, ec);
    if (ec) return invalid("--etcd-cert " + tls.cert_file + ": " + ec.message());
    ctx->use_private_key_file(tls.key_file, ssl::context::pem, ec);
    const bool mismatch = ec && ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH;
    if (mismatch || (!ec && SSL_CTX_check_private_key(ctx->native_handle()) != 1))
      return invalid("--etcd-key " + tls.key_file + " is not the key of --etcd-cert " + tls.cert_file);
    if (ec) return invalid("--etcd-key " + tls.key_file + ": " + ec.message());
  }
  return ctx;
}

Connection::Connection(asio::io_context& ioc, ssl::context* tls) : ioc_(ioc) {
  if (tls)
    tls_.emplace(ioc, *tls);
  else
    plain_.emplace(ioc);
}

beast::tcp_stream& Connection::tcp() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }

Status Connection::open(const Endpoint& ep, std::chrono::milliseconds timeout) {
  if (ep.tls && !tls_) return internal("etcd endpoint " + ep.text + " needs a TLS context");
  asio::ip::tcp::resolver resolver(ioc_);
  beast::error_code ec;
  auto addrs = resolver.resolve(ep.host, ep.port, ec);
  if (ec) return unavailable("cannot resolve etcd endpoint " + ep.text + ": " + ec.message());
  tcp().expires_after(timeout);
  bool done = false;
  tcp().async_connect(addrs, [&](beast::error_code e, const auto&) {
    ec = e;
    done = true;
  });
  ioc_.run();
  ioc_.restart();
  if (!done || ec) return unavailable("cannot reach etcd at " + ep.text + ": " + ec.message());
  if (!tls_) return Status::ok();

  // The certificate must name the host the endpoint gives (a name, or an IP address).
  tls_->set_verify_callback(ssl::host_name_verification(ep.host), ec);
  beast::error_code ip_ec;
  asio::ip::make_address(ep.host, ip_ec);
  if (ip_ec) SSL_set_tlsext_host_name(tls_->native_handle(), ep.host.c_str());  // SNI takes names only
  done = false;
  tls_->async_handshake(ssl::stream_base::client, [&](beast::error_code e) {
    ec = e;
    done = true;
  });
  ioc_.run();
  ioc_.restart();
  if (done && !ec) return Status::ok();
  if (!done || ec == beast::error::timeout)
    return unavailable("etcd at " + ep.text + " did not finish the TLS handshake within " +
                       std::to_string(timeout.count()) + " ms");
  const long verify = SSL_get_verify_result(tls_->native_handle());
  if (verify != X509_V_OK)
    return error(Code::kPermissionDenied, "etcd at " + ep.text + " presented a certificate this node does not trust (" +
                                              X509_verify_cert_error_string(verify) +
                                              "): it must be signed by the CA of --etcd-ca and name " + ep.host);
  // etcd took the connection and broke the handshake (an alert, or a reset when it closed
  // with this client's last messages unread): it refused this client's certificate.
  return refused(ep, "the TLS handshake", ec);
}

Status Connection::refused(const Endpoint& ep, const std::string& what, const beast::error_code& ec) {
  return error(Code::kPermissionDenied,
               "etcd at " + ep.text + " refused this node's TLS connection during " + what + " (" + ec.message() +
                   "): etcd wants a client certificate (--etcd-cert, --etcd-key) signed by the CA it trusts");
}

Status Connection::failed(const Endpoint& ep, const std::string& what, const beast::error_code& ec) const {
  // A TLS alert after the handshake: etcd refused something of this connection. A stream cut
  // short is not one: that is etcd going away, and the next endpoint is tried.
  if (tls_ && ec.category() == asio::error::get_ssl_category()) return refused(ep, what, ec);
  return unavailable("etcd at " + ep.text + " failed during " + what + ": " + ec.message());
}

}  // namespace ptcfs::transport::etcd
