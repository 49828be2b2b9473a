// A real etcd (Debian's etcd-server) for tests: started on free loopback ports with its own
// data directory, waited for until it answers, killed and removed at the end.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "transport/etcd_client.h"

namespace ptcfs::testing {

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class EtcdProcess {
 public:
  EtcdProcess() {
    dir_ = std::filesystem::temp_directory_path() /
           ("ptcfs-etcd-" + std::to_string(::getpid()) + "-" + std::to_string(free_port()));
    std::filesystem::create_directories(dir_);
    const std::string client = "http://127.0.0.1:" + std::to_string(free_port());
    const std::string peer = "http://127.0.0.1:" + std::to_string(free_port());
    url_ = client;
    const std::string log = (dir_ / "etcd.log").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log.c_str(), "w", stderr);
      (void)f;
      const std::string data = (dir_ / "data").string();
      const std::string cluster = "t=" + peer;
      ::execlp("etcd", "etcd", "--name", "t", "--data-dir", data.c_str(), "--listen-client-urls", client.c_str(),
               "--advertise-client-urls", client.c_str(), "--listen-peer-urls", peer.c_str(),
               "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster", cluster.c_str(),
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
    auto c = transport::EtcdClient::make(url_, std::chrono::milliseconds(500));
    for (int i = 0; i < 100 && c; ++i) {
      if ((*c)->put("/ready", "1")) {
        ready_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~EtcdProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool ready() const { return ready_; }
  const std::string& url() const { return url_; }
  void stop() {
    ::kill(pid_, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // every thread stopped
  }
  void cont() { ::kill(pid_, SIGCONT); }

 private:
  std::filesystem::path dir_;
  std::string url_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace ptcfs::testing
