#include "daemon/listen_checks.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "daemon/metrics_exporter.h"
#include "transport/frame.h"

namespace ptcfs {
namespace {

// Binds a socket to ADDR (HOST:PORT) and closes it: what the control server's acceptor does
// (address reuse on, so a port in TIME_WAIT passes as it will then).
Status try_bind(const std::string& flag, const std::string& addr) {
  std::string host;
  uint16_t port = 0;
  PTC_RETURN_IF_ERROR(transport::parse_address(addr, host, port).with_context(flag));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    return invalid(flag + " " + addr + ": cannot resolve '" + host + "': " + ::gai_strerror(rc));
  int err = 0;
  bool bound = false;
  for (const addrinfo* a = found; a && !bound; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!bound) err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (!bound) return invalid(flag + " " + addr + ": cannot listen there: " + std::strerror(err));
  return Status::ok();
}

}  // namespace

Status check_listen_flags(const ListenFlags& f) {
  PTC_RETURN_IF_ERROR(try_bind("--listen", f.listen));
  if (!f.metrics.empty()) {
    // Started and stopped at once: the exporter's own parser and listener judge the address.
    auto m = MetricsExporter::start(f.metrics, [] { return std::vector<GaugeSample>{}; });
    if (!m) return invalid(m.status().message());
  }
  if (!f.direct_socket.empty() && f.direct_socket != "none") {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::absolute(f.direct_socket, ec).parent_path();
    if (!ec) std::filesystem::create_directories(dir, ec);  // the node makes it too (/run/ptcfs)
    if (ec) return invalid("--direct-socket " + f.direct_socket + ": cannot make its folder: " + ec.message());
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      return invalid("--direct-socket " + f.direct_socket + ": cannot make a socket in " + dir.string() + ": " +
                     std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace ptcfs
