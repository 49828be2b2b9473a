// The node's direct socket (docs/FORMATS.md "Direct socket"): processes on the node
// read a file of the mount without FUSE. A client sends {"op": "open", "path": P} (an
// absolute path inside the mount); the server answers with the file's map
// (daemon/direct/file_map.h) and read-only descriptors, and holds the file's version (its
// view) until the client sends {"op": "close", "handle": H} or closes the connection: a
// repartition meanwhile does not remove the blobs it maps. Only the daemon's own uid and
// root may connect (SO_PEERCRED). docs/FORMATS.md "Direct socket" has the messages.
//
// One thread per connection, at most `max_connections` at once (more are refused with a
// message saying so). Not Asio, unlike the RPC server: a message carries descriptors
// (SCM_RIGHTS), which Asio's sockets do not pass, so each connection is a blocking
// recvmsg/sendmsg loop; a training process holds few connections, and open() resolves a view
// (it may pull a remote slice), which would block an event loop anyway. Thread-safety: the
// object is driven by its own threads; the destructor stops them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "fs/views.h"
#include "ptc/base/status.h"

namespace ptcfs {

class DirectServer {
 public:
  // The view of a file, by its path relative to the mount root (fs::Filesystem::open_view).
  using Resolve = std::function<Result<std::shared_ptr<const fs::View>>(const std::string&)>;

  // Listens at `socket_path` (a stale socket there is replaced) for files under `mount`.
  static Result<std::unique_ptr<DirectServer>> start(const std::string& socket_path, const std::string& mount,
                                                     Resolve resolve, size_t max_connections = 256);
  ~DirectServer();
  const std::string& path() const { return path_; }
  size_t connections() const { return live_.load(); }
  size_t files_held() const { return held_.load(); }

 private:
  DirectServer(std::string path, std::string mount, Resolve resolve, int listen_fd, size_t max)
      : path_(std::move(path)),
        mount_(std::move(mount)),
        resolve_(std::move(resolve)),
        listen_fd_(listen_fd),
        max_(max) {}
  void accept_loop();
  void serve(int sock);

  std::string path_, mount_;
  Resolve resolve_;
  int listen_fd_;
  size_t max_;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> live_{0}, held_{0};
  std::thread acceptor_;
  std::mutex mu_;  // guards socks_
  std::list<int> socks_;
  std::mutex done_mu_;  // with done_cv_: the destructor waits for every connection's thread
  std::condition_variable done_cv_;
};

}  // namespace ptcfs
