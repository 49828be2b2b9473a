// A real S3 server for tests: SeaweedFS (`weed server` with its S3 gateway) on free loopback
// ports with its own folder, waited for until it answers, and faults done to it for real:
// SIGSTOP/SIGCONT, SIGKILL and a restart on the same folder. The binary is $PTCFS_WEED, else
// $PTCFS_WEED_DEFAULT (the project's Python environment's, set by tests/CMakeLists.txt), else
// `weed` on PATH.
//
// Identities (SigV4): kAccessKey/kSecretKey may do anything; kReaderKey/kReaderSecret may only
// read and list (a bucket that refuses its writes).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "etcd_process.h"
#include "transport/s3_client.h"

namespace ptcfs::testing {

inline constexpr const char* kAccessKey = "ptcfs-test";
inline constexpr const char* kSecretKey = "s3cr3t/with+odd=chars";
inline constexpr const char* kReaderKey = "ptcfs-reader";
inline constexpr const char* kReaderSecret = "reader-secret";

class S3Server {
 public:
  // `tls`: the gateway serves https with a certificate for 127.0.0.1 from a CA of its own (ca_file()).
  explicit S3Server(bool tls = false) : tls_(tls) {
    dir_ = std::filesystem::temp_directory_path() /
           ("ptcfs-s3-" + std::to_string(::getpid()) + "-" + std::to_string(free_port()));
    std::filesystem::create_directories(dir_ / "data");
    for (int& p : ports_) p = free_port();
    std::ofstream(dir_ / "s3.json") << R"({"identities":[)"
                                    << R"({"name":"writer","credentials":[{"accessKey":")" << kAccessKey
                                    << R"(","secretKey":")" << kSecretKey
                                    << R"("}],"actions":["Admin","Read","Write","List","Tagging"]},)"
                                    << R"({"name":"reader","credentials":[{"accessKey":")" << kReaderKey
                                    << R"(","secretKey":")" << kReaderSecret << R"("}],"actions":["Read","List"]}]})";
    if (tls_) {
      const std::string cmd = "bash " + std::string(PTCFS_SOURCE_DIR) + "/deploy/etcd-certs.sh " +
                              (dir_ / "tls").string() + " 127.0.0.1 localhost > /dev/null";
      if (std::system(cmd.c_str()) != 0) return;
    }
    // A port another process took between free_port() and weed's bind (weed exits): other ports.
    for (int attempt = 0; attempt < 3 && !ready_; ++attempt) {
      if (attempt) {
        kill();
        for (int& p : ports_) p = free_port();
      }
      start();
    }
  }
  ~S3Server() {
    kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  bool ready() const { return ready_; }
  std::string endpoint() const {
    return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(ports_[0]);
  }
  std::string ca_file() const { return (dir_ / "tls" / "ca.crt").string(); }

  transport::S3Options options(const std::string& bucket, const std::string& prefix = "") const {
    transport::S3Options o;
    o.endpoint = transport::parse_s3_endpoint(endpoint()).value();
    o.bucket = bucket;
    o.prefix = prefix;
    o.credentials = {kAccessKey, kSecretKey, ""};
    if (tls_) o.ca_file = ca_file();
    o.stall_timeout = std::chrono::seconds(2);
    o.backoff_base = std::chrono::milliseconds(50);
    o.backoff_cap = std::chrono::milliseconds(500);
    return o;
  }

  void stop() {
    ::kill(pid_, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  void cont() { ::kill(pid_, SIGCONT); }
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    ready_ = false;
  }
  // Starts it again on the same folder and ports (after kill()).
  bool restart() {
    start();
    return ready_;
  }

 private:
  static std::string binary() {
    for (const char* v : {"PTCFS_WEED", "PTCFS_WEED_DEFAULT"})
      if (const char* p = std::getenv(v); p && *p && ::access(p, X_OK) == 0) return p;
    return "weed";
  }

  void start() {
    const std::string log = (dir_ / "weed.log").string();
    auto port = [&](int i) { return std::to_string(ports_[i]); };
    std::vector<std::string> args = {binary(),
                                     "server",
                                     "-dir=" + (dir_ / "data").string(),
                                     "-ip=127.0.0.1",
                                     "-ip.bind=127.0.0.1",
                                     "-master.port=" + port(1),
                                     "-master.port.grpc=" + port(2),
                                     "-volume.port=" + port(3),
                                     "-volume.port.grpc=" + port(4),
                                     "-volume.max=200",
                                     "-master.volumeSizeLimitMB=256",
                                     "-filer",
                                     "-filer.port=" + port(5),
                                     "-filer.port.grpc=" + port(6),
                                     "-s3",
                                     "-s3.port=" + port(0),
                                     "-s3.port.grpc=" + port(7),
                                     "-s3.port.iceberg=0",
                                     "-s3.port.lance=0",
                                     "-s3.config=" + (dir_ / "s3.json").string(),
                                     "-master.telemetry=false"};
    if (tls_) {
      args.push_back("-s3.cert.file=" + (dir_ / "tls" / "server.crt").string());
      args.push_back("-s3.key.file=" + (dir_ / "tls" / "server.key").string());
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log.c_str(), "a", stderr);
      f = std::freopen(log.c_str(), "a", stdout);
      (void)f;
      ::chdir(dir_.c_str());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    auto o = options("ready-probe");
    o.attempts = 1;
    o.stall_timeout = std::chrono::seconds(2);
    auto c = transport::S3Client::make(o);
    for (int i = 0; i < 300 && c; ++i) {
      if ((*c)->create_bucket()) {
        ready_ = true;
        return;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;  // it exited
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // Why, for the test's output: the binary tried and the end of its log.
    std::ifstream log_in(log);
    std::string text((std::istreambuf_iterator<char>(log_in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "S3Server: %s (%s) did not answer; the end of weed.log:\n%s\n", binary().c_str(),
                 pid_ < 0 ? "exited" : "timed out", text.substr(text.size() > 4000 ? text.size() - 4000 : 0).c_str());
  }

  bool tls_;
  std::filesystem::path dir_;
  int ports_[8] = {};
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace ptcfs::testing
