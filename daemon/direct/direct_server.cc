#include "daemon/direct/direct_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>

#include "daemon/direct/file_map.h"
#include "ptc/base/json_util.h"
#include "ptc/base/log.h"
#include "transport/direct_protocol.h"

namespace ptcfs {

using nlohmann::json;
namespace direct = transport::direct;

namespace {

Status reply_error(int sock, const Status& s) {
  const json j = {{"ok", false}, {"code", code_name(s.code())}, {"error", s.message()}};
  return direct::send_message(sock, j.dump(), {}, {});
}

// Whether the connected peer may use the socket: the daemon's own uid, or root.
Status check_peer(int sock) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return io_error("reading the direct socket's peer credentials", errno);
  if (cred.uid != 0 && cred.uid != ::geteuid())
    return error(Code::kPermissionDenied, "the direct socket serves only uid " + std::to_string(::geteuid()) +
                                              " (the daemon's) and root; this process runs as uid " +
                                              std::to_string(cred.uid) + ": read through the mount");
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<DirectServer>> DirectServer::start(const std::string& socket_path, const std::string& mount,
                                                          Resolve resolve, size_t max_connections) {
  PTC_ASSIGN_OR_RETURN(int fd, direct::listen_unix(socket_path));
  std::unique_ptr<DirectServer> s(new DirectServer(socket_path, mount, std::move(resolve), fd, max_connections));
  s->acceptor_ = std::thread([p = s.get()] { p->accept_loop(); });
  log::info("direct socket at {}", socket_path);
  return s;
}

DirectServer::~DirectServer() {
  stopping_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard lock(mu_);
    for (int s : socks_) ::shutdown(s, SHUT_RDWR);  // wakes their threads
  }
  std::unique_lock lock(done_mu_);
  done_cv_.wait(lock, [this] { return live_.load() == 0; });
  ::close(listen_fd_);
  ::unlink(path_.c_str());
}

void DirectServer::accept_loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, 200);
    if (r <= 0) continue;
    const int sock = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (sock < 0) continue;
    if (auto s = check_peer(sock); !s) {
      log::warn("direct socket: refused a client: {}", s.message());
      (void)reply_error(sock, s);
      ::close(sock);
      continue;
    }
    if (live_.load() >= max_) {
      (void)reply_error(sock, error(Code::kResourceExhausted,
                                    "the direct socket has " + std::to_string(max_) +
                                        " connections open, its limit; close files or read through the mount"));
      ::close(sock);
      continue;
    }
    ++live_;
    {
      std::lock_guard lock(mu_);
      socks_.push_back(sock);
    }
    std::thread([this, sock] {
      serve(sock);
      {
        std::lock_guard lock(mu_);
        socks_.remove(sock);
      }
      ::close(sock);
      std::lock_guard lock(done_mu_);
      --live_;
      done_cv_.notify_all();
    }).detach();
  }
}

void DirectServer::serve(int sock) {
  std::map<uint64_t, std::shared_ptr<const fs::View>> handles;  // what this client holds
  uint64_t next = 1;
  direct::Limits limits;
  limits.max_json = 64 << 10;
  limits.max_binary = 0;
  limits.max_fds = 0;
  while (!stopping_) {
    auto msg = direct::recv_message(sock, limits);
    if (!msg) {
      if (msg.status().code() != Code::kUnavailable) {
        log::warn("direct socket: {}", msg.status().message());
        (void)reply_error(sock, msg.status());
      }
      break;
    }
    auto req = parse_json(msg->json, "direct socket request");
    auto op = req ? member_string(*req, "op", "direct socket request") : Result<std::string>(req.status());
    if (!op) {
      (void)reply_error(sock, op.status());
      break;  // not a client of this protocol
    }
    Status st;
    if (*op == "close") {
      auto h = member_u64(*req, "handle", "direct socket close");
      if (h && handles.erase(*h)) {
        --held_;
        st = direct::send_message(sock, json{{"ok", true}}.dump(), {}, {});
      } else {
        st = reply_error(sock, h ? not_found("no handle " + std::to_string(*h) + " on this connection") : h.status());
      }
    } else if (*op == "open") {
      auto path = member_string(*req, "path", "direct socket open");
      // Map version 2 (runs of rows) for a client that asks for it; 1 (spans) for any other.
      auto version = member_u64_or(*req, "map", 1, "direct socket open");
      Result<std::shared_ptr<const fs::View>> view = path.status();
      if (path && !version) view = version.status();
      if (path && version) {
        if (path->rfind(mount_ + "/", 0) != 0)
          view = invalid(*path + " is not inside the mount " + mount_);
        else
          view = resolve_(path->substr(mount_.size() + 1));
      }
      fs::ReadBuffer rb;
      const bool runs = version && *version >= 2;
      if (runs) rb.take_rows();
      Result<FileMap> map = view.status();
      if (view) {
        auto s = (*view)->read(0, (*view)->size(), rb);
        map = s ? map_of(rb) : Result<FileMap>(s.with_context("reading " + *path));
      }
      if (!map) {
        st = reply_error(sock, map.status());
      } else {
        const uint64_t h = next++;
        json j = {{"ok", true}, {"handle", h}, {"size", (*view)->size()}, {"version", (*view)->version()}};
        std::string binary;
        if (runs) {
          j["map"] = 2;
          j["runs"] = map->runs.runs().size();
          binary = direct::encode_runs(map->runs);
        } else {
          const auto spans = map->runs.spans();
          j["spans"] = spans.size();
          binary = direct::encode_spans(spans);
        }
        st = direct::send_message(sock, j.dump(), binary, map->fds);
        if (st) {
          handles.emplace(h, *view);
          ++held_;
        }
      }
    } else {
      st = reply_error(sock, invalid("unknown direct socket operation '" + *op + "' (open, close)"));
    }
    if (!st) break;
  }
  held_ -= handles.size();
}

}  // namespace ptcfs
