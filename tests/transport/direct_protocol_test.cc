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

using namespace ptcfs;
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
  Status sent;
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
    CHECK(m.status().code() == Code::kUnavailable);
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

TEST_CASE("runs of rows round-trip; whole rows back to back merge into one span", "[direct]") {
  RunMap m;
  m.add(0, 0, 8);                                                     // a header
  m.add(0, 8, 8);                                                     // continues it: merged
  m.add_rows(3, {{1, 100, 4, 10}, {kZeros, 7, 2, 9}, {2, 0, 4, 4}});  // strided: a run of rows
  m.add_rows(2, {{1, 500, 4, 8}, {1, 504, 4, 8}});                    // back to back: one span
  m.add(1, 516, 1);                                                   // continues that span
  m.add_rows(1, {{2, 50, 1, 0}, {kZeros, 0, 3, 0}});                  // one row: its pieces as spans
  REQUIRE(m.runs().size() == 5);
  CHECK(m.size() == 16 + 3 * 10 + 17 + 4);
  CHECK(m.runs()[1].rows == 3);
  CHECK(m.runs()[1].count == 3);
  CHECK(m.pieces()[m.runs()[1].first + 1].off == 0);  // zeros have no offset
  CHECK(m.runs()[2].rows == 1);
  CHECK(m.pieces()[m.runs()[2].first].len == 17);

  auto back = decode_runs(encode_runs(m), 3);
  REQUIRE(back.is_ok());
  CHECK(back->size() == m.size());
  REQUIRE(back->runs().size() == m.runs().size());
  REQUIRE(back->pieces().size() == m.pieces().size());
  for (size_t i = 0; i < m.pieces().size(); ++i) {
    CHECK(back->pieces()[i].src == m.pieces()[i].src);
    CHECK(back->pieces()[i].off == m.pieces()[i].off);
    CHECK(back->pieces()[i].len == m.pieces()[i].len);
    CHECK(back->pieces()[i].stride == m.pieces()[i].stride);
  }
  // Version 1: every piece of every row.
  const std::vector<Span> spans = m.spans();
  REQUIRE(spans.size() == 1 + 9 + 1 + 2);
  CHECK(spans[0].len == 16);
  CHECK((spans[1].src == 1 && spans[1].off == 100 && spans[1].len == 4));
  CHECK((spans[2].src == kZeros && spans[2].len == 2));
  CHECK((spans[4].src == 1 && spans[4].off == 110));
  CHECK((spans[9].src == 2 && spans[9].off == 8));
  CHECK((spans[10].src == 1 && spans[10].off == 500 && spans[10].len == 17));
}

TEST_CASE("a malformed map of runs is refused", "[direct]") {
  RunMap m;
  m.add_rows(2, {{0, 0, 4, 8}, {1, 0, 4, 4}});
  const std::string good = encode_runs(m);
  auto refused = [](const std::string& bin, size_t nfds, const std::string& text) {
    auto r = decode_runs(bin, nfds);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find(text) != std::string::npos);
  };
  refused(good, 1, "names descriptor 1 of 1");
  refused(good.substr(0, good.size() - 1), 2, "cut short");
  refused(good.substr(0, 10), 2, "cut short");
  std::string no_rows = good;
  std::memset(no_rows.data(), 0, 8);
  refused(no_rows, 2, "no rows or no pieces");
  // Rows whose last piece ends past 2^64.
  RunMap far;
  far.add_rows(uint64_t{1} << 40, {{0, 0, 1, uint64_t{1} << 30}, {0, 5, 1, 1}});
  refused(encode_runs(far), 1, "overflows");
  CHECK(decode_runs("", 0).is_ok());  // an empty file
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
  CHECK(gone.status().code() == Code::kUnavailable);
  REQUIRE(std::system(("rm -rf " + std::string(tmpl)).c_str()) == 0);
}
