// The direct socket's framing and span codec over a real socketpair, descriptors included
// (transport/direct_protocol.h).
#include "transport/direct_protocol.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace ptcfs::transport::direct;

namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
};

// A file of `n` bytes, its descriptor open for reading.
int temp_file_fd(size_t n) {
  char tmpl[] = "/tmp/ptcfs-direct-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  ::unlink(tmpl);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(n)) == 0);
  return fd;
}

uint64_t size_of(int fd) {
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

TEST_CASE("a message with 600 descriptors arrives whole, each descriptor the file sent", "[direct]") {
  Pair p;
  std::vector<int> fds;
  for (size_t i = 0; i < 600; ++i) fds.push_back(temp_file_fd(i + 1));  // sizes tell them apart
  const std::string json = R"({"ok": true})";
  std::string binary(1000, 'x');
  ptc::Status sent;
  std::thread writer([&] { sent = send_message(p.a, json, binary, fds); });
  auto m = recv_message(p.b);
  writer.join();
  REQUIRE(sent.is_ok());
  INFO(m.status().to_string());
  REQUIRE(m.is_ok());
  CHECK(m->json == json);
  CHECK(m->binary == binary);
  REQUIRE(m->fds.size() == 600);
  for (size_t i = 0; i < 600; ++i) {
    CHECK(size_of(m->fds[i]) == i + 1);
    CHECK((::fcntl(m->fds[i], F_GETFD) & FD_CLOEXEC) != 0);
    ::close(m->fds[i]);
    ::close(fds[i]);
  }
}

TEST_CASE("a closed connection, a foreign header and oversized parts are refused", "[direct]") {
  {
    Pair p;
    ::close(p.a);
    p.a = -1;
    auto m = recv_message(p.b);
    REQUIRE_FALSE(m.is_ok());
    CHECK(m.status().code() == ptc::Code::kUnavailable);
  }
  {
    Pair p;
    REQUIRE(::write(p.a, "GET / HTTP/1.1\r\n\r\n", 18) == 18);
    auto m = recv_message(p.b);
    REQUIRE_FALSE(m.is_ok());
    CHECK(m.status().message() == "direct socket: not a ptcfs message");
  }
  {
    Pair p;
    Limits small;
    small.max_json = 10;
    REQUIRE(send_message(p.a, std::string(11, ' '), "", {}).is_ok());
    auto m = recv_message(p.b, small);
    REQUIRE_FALSE(m.is_ok());
    CHECK(m.status().message().find("larger than allowed (11 bytes of JSON") != std::string::npos);
  }
  {
    // The connection ends inside a message: an error, not a short message.
    Pair p;
    char header[16] = {'P', 'T', 'C', 'D', 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    REQUIRE(::write(p.a, header, 16) == 16);
    REQUIRE(::write(p.a, "{}", 2) == 2);
    ::close(p.a);
    p.a = -1;
    auto m = recv_message(p.b);
    REQUIRE_FALSE(m.is_ok());
    CHECK(m.status().message() == "direct socket: the connection ended inside a message");
  }
}

TEST_CASE("spans round-trip and a map naming a missing descriptor is refused", "[direct]") {
  const std::vector<Span> spans = {{0, 8, 100}, {kZeros, 0, 4096}, {1, uint64_t{1} << 40, 7}};
  auto back = decode_spans(encode_spans(spans), 2);
  REQUIRE(back.is_ok());
  REQUIRE(back->size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK((*back)[i].src == spans[i].src);
    CHECK((*back)[i].off == spans[i].off);
    CHECK((*back)[i].len == spans[i].len);
  }
  auto missing = decode_spans(encode_spans(spans), 1);
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.status().message() == "direct socket: a span names descriptor 1 of 1");
  auto cut = decode_spans(encode_spans(spans).substr(0, 30), 2);
  REQUIRE_FALSE(cut.is_ok());
  CHECK(cut.status().message() == "direct socket: the file map is cut short");
  auto overflow = decode_spans(encode_spans({{0, ~uint64_t{0} - 3, 10}}), 1);
  REQUIRE_FALSE(overflow.is_ok());
}

TEST_CASE("a socket path longer than sockaddr_un allows still listens and connects", "[direct]") {
  char tmpl[] = "/tmp/ptcfs-direct-dir-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  for (int i = 0; i < 4; ++i) {
    dir += "/a-rather-long-folder-name-" + std::to_string(i);
    REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  }
  const std::string path = dir + "/direct.sock";
  REQUIRE(path.size() > 108);
  auto l = listen_unix(path);
  INFO(l.status().to_string());
  REQUIRE(l.is_ok());
  auto c = connect_unix(path);
  REQUIRE(c.is_ok());
  const int s = ::accept(*l, nullptr, nullptr);
  REQUIRE(s >= 0);
  REQUIRE(send_message(*c, "{}", "", {}).is_ok());
  auto m = recv_message(s);
  REQUIRE(m.is_ok());
  CHECK(m->json == "{}");
  ::close(s);
  ::close(*c);
  ::close(*l);
  auto gone = connect_unix(dir + "/nothing.sock");
  REQUIRE_FALSE(gone.is_ok());
  CHECK(gone.status().code() == ptc::Code::kUnavailable);
  REQUIRE(std::system(("rm -rf " + std::string(tmpl)).c_str()) == 0);
}
