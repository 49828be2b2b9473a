#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "fs/read_buffer.h"

using ptcfs::fs::ReadBuffer;

namespace {

std::string bytes_of(const ReadBuffer& b) {
  std::string out(b.size(), '?');
  REQUIRE(b.copy_to(reinterpret_cast<std::byte*>(out.data())).is_ok());
  return out;
}

// A real temporary file holding `content`, removed when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    char name[] = "/tmp/ptcfs-read-buffer-XXXXXX";
    fd_ = ::mkstemp(name);
    REQUIRE(fd_ >= 0);
    path_ = name;
    REQUIRE(::write(fd_, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  }
  ~TempFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace

TEST_CASE("a read buffer copies memory, zeros, file ranges and mapped memory in the order they were added") {
  const std::string a = "header:", mapped = "MAPPED";
  TempFile file("0123456789abcdef");
  ReadBuffer b;
  b.add_mem(a.data(), a.size());
  b.add_zeros(3);
  b.add_fd(file.fd(), 4, 5);
  b.add_mapped(mapped.data(), mapped.size(), 99, 4096);

  const auto& s = b.segments();
  REQUIRE(s.size() == 4);
  CHECK(s[0].mem == reinterpret_cast<const std::byte*>(a.data()));
  CHECK(s[0].fd == -1);
  CHECK(s[0].len == 7);
  CHECK_FALSE(s[0].zeros);
  CHECK(s[1].zeros);
  CHECK(s[1].fd == -1);
  CHECK(s[1].len == 3);
  CHECK(s[2].fd == file.fd());
  CHECK(s[2].off == 4);
  CHECK(s[2].len == 5);
  CHECK(s[3].mem == reinterpret_cast<const std::byte*>(mapped.data()));
  CHECK(s[3].fd == -1);
  CHECK(s[3].origin_fd == 99);
  CHECK(s[3].origin_off == 4096);
  CHECK(s[3].len == 6);
  CHECK(b.size() == 21);
  CHECK(bytes_of(b) == std::string("header:\0\0\0"
                                   "45678"
                                   "MAPPED",
                                   21));
}

TEST_CASE("a read buffer merges a segment that continues the previous one") {
  const std::string m = "abcdefgh";
  TempFile file("0123456789");
  ReadBuffer b;
  b.add_mem(m.data(), 3);
  b.add_mem(m.data() + 3, 2);  // continues in memory: merged
  b.add_fd(file.fd(), 0, 4);
  b.add_fd(file.fd(), 4, 3);  // continues in the file: merged
  b.add_fd(file.fd(), 8, 2);  // skips byte 7: a new segment
  b.add_zeros(2);
  b.add_zeros(5);  // zeros after zeros: merged
  REQUIRE(b.segments().size() == 4);
  CHECK(b.segments()[0].len == 5);
  CHECK(b.segments()[1].off == 0);
  CHECK(b.segments()[1].len == 7);
  CHECK(b.segments()[2].off == 8);
  CHECK(b.segments()[2].len == 2);
  CHECK(b.segments()[3].len == 7);
  CHECK(b.size() == 21);
  CHECK(bytes_of(b) == std::string("abcde"
                                   "0123456"
                                   "89"
                                   "\0\0\0\0\0\0\0",
                                   21));
}

TEST_CASE("mapped memory merges only when both its memory and its file range continue") {
  const std::string m = "0123456789";
  ReadBuffer b;
  b.add_mapped(m.data(), 2, 7, 100);
  b.add_mapped(m.data() + 2, 2, 7, 102);  // continues both: merged
  b.add_mapped(m.data() + 4, 2, 8, 104);  // another file: new
  b.add_mapped(m.data() + 6, 2, 8, 200);  // file range jumps: new
  b.add_mem(m.data() + 8, 2);             // plain memory after mapped memory: new
  REQUIRE(b.segments().size() == 4);
  CHECK(b.segments()[0].len == 4);
  CHECK(b.segments()[0].origin_off == 100);
  CHECK(b.segments()[1].origin_fd == 8);
  CHECK(b.segments()[2].origin_off == 200);
  CHECK(b.segments()[3].origin_fd == -1);
  CHECK(bytes_of(b) == m);
}

TEST_CASE("empty additions add no segment") {
  const std::string m = "x";
  ReadBuffer b;
  b.add_mem(m.data(), 0);
  b.add_mapped(m.data(), 0, 3, 0);
  b.add_fd(0, 0, 0);
  b.add_zeros(0);
  CHECK(b.segments().empty());
  CHECK(b.size() == 0);
}

TEST_CASE("zeros longer than the shared zero block are split into blocks of 1 MiB") {
  constexpr uint64_t kMiB = 1 << 20;
  ReadBuffer b;
  b.add_zeros(2 * kMiB + 5);
  REQUIRE(b.segments().size() == 3);
  CHECK(b.segments()[0].len == kMiB);
  CHECK(b.segments()[1].len == kMiB);
  CHECK(b.segments()[2].len == 5);
  CHECK(b.size() == 2 * kMiB + 5);
  CHECK(bytes_of(b) == std::string(2 * kMiB + 5, '\0'));
}

TEST_CASE("copying a file range past the end of its file is kCorrupt, not short bytes") {
  TempFile file("0123");
  ReadBuffer b;
  b.add_fd(file.fd(), 2, 5);
  std::vector<std::byte> dst(5);
  const auto st = b.copy_to(dst.data());
  CHECK(st.code() == ptcfs::Code::kCorrupt);
  CHECK(st.message() == "blob shorter than its metadata says");
}

TEST_CASE("copying from a closed descriptor is kIo") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::close(fds[0]);
  ::close(fds[1]);
  ReadBuffer b;
  b.add_fd(fds[0], 0, 1);
  std::byte dst[1];
  CHECK(b.copy_to(dst).code() == ptcfs::Code::kIo);
}

TEST_CASE("a read buffer keeps its owners alive until it is destroyed") {
  auto owner = std::make_shared<int>(7);
  std::weak_ptr<int> weak = owner;
  {
    ReadBuffer b;
    b.keep(owner);
    owner.reset();
    CHECK_FALSE(weak.expired());
  }
  CHECK(weak.expired());
}

TEST_CASE("a fragmented read buffer is gathered into one segment it owns") {
  std::string src(400, '\0');
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>('a' + i % 26);
  TempFile file("0123456789");
  ReadBuffer b;
  for (size_t i = 0; i < 20; ++i) b.add_mem(src.data() + i * 20, 10);  // 20 pieces of 10 bytes, not contiguous
  b.add_fd(file.fd(), 2, 3);
  b.add_zeros(2);
  const std::string want = bytes_of(b);
  REQUIRE(b.segments().size() == 22);

  SECTION("at or under the segment count, nothing changes") {
    REQUIRE(b.gather_if_fragmented(22, 64 << 10).is_ok());
    CHECK(b.segments().size() == 22);
  }
  SECTION("pieces long enough on average, nothing changes") {
    REQUIRE(b.gather_if_fragmented(16, 8).is_ok());
    CHECK(b.segments().size() == 22);
  }
  SECTION("many small pieces become one memory segment with the same bytes") {
    REQUIRE(b.gather_if_fragmented(16, 64 << 10).is_ok());
    REQUIRE(b.segments().size() == 1);
    CHECK(b.segments()[0].fd == -1);
    CHECK(b.segments()[0].origin_fd == -1);
    CHECK_FALSE(b.segments()[0].zeros);
    CHECK(b.size() == want.size());
    CHECK(bytes_of(b) == want);
  }
}

TEST_CASE("gathering a buffer whose file range cannot be read fails and leaves it as it was") {
  const std::string m(100, 'x');
  ReadBuffer b;
  {
    TempFile file("0123");
    for (int i = 0; i < 20; ++i) b.add_mem(m.data() + (i % 2) * 50, 1);
    b.add_fd(file.fd(), 0, 10);  // past the end of the file
  }
  const size_t n = b.segments().size();
  CHECK_FALSE(b.gather_if_fragmented(16, 64 << 10).is_ok());
  CHECK(b.segments().size() == n);
}

TEST_CASE("the zero block is zeros, shared by every zero segment") {
  const std::byte* z = ptcfs::fs::zero_block();
  CHECK(z == ptcfs::fs::zero_block());
  for (uint64_t i = 0; i < ptcfs::fs::kZeroBlock; i += 4093) CHECK(z[i] == std::byte{0});
  ReadBuffer b;
  b.add_zeros(5);
  REQUIRE(b.segments().size() == 1);
  CHECK(b.segments()[0].mem == z);
}

TEST_CASE("rows of a strided slice: one segment of rows, as given") {
  // Two "blobs" in memory; a row is 2 bytes of the first (stride 4), 3 zeros, 1 byte of the second (stride 2).
  const std::string x = "AaBbCcDd", y = "1_2_3_";
  const auto* px = reinterpret_cast<const std::byte*>(x.data());
  const auto* py = reinterpret_cast<const std::byte*>(y.data());
  const std::vector<ReadBuffer::RowPiece> pieces = {
      {px, 7, 0, 2, 4}, {nullptr, -1, 0, 3, 0}, {py, 8, 0, 1, 2}, {px, 7, 0, 0, 4}};  // the last one is empty
  const std::string want(
      "Aa\0\0\0"
      "1Cc\0\0\0"
      "2",
      12);
  ReadBuffer rows;
  rows.take_rows();
  rows.add_mem("h", 1);
  rows.add_rows(2, pieces);
  REQUIRE(rows.segments().size() == 2);
  CHECK(rows.segments()[1].rows == 0);
  CHECK(rows.segments()[1].len == 12);
  REQUIRE(rows.rows().size() == 1);
  CHECK(rows.rows()[0].rows == 2);
  CHECK(rows.rows()[0].pieces.size() == 4);  // the empty one too: the direct map leaves it out
  CHECK(rows.rows()[0].pieces[2].fd == 8);
  CHECK(rows.rows()[0].pieces[2].stride == 2);
  CHECK(rows.size() == 13);
  CHECK(bytes_of(rows) == "h" + want);

  rows.add_rows(0, pieces);                                      // no rows: nothing
  rows.add_rows(3, {{px, 7, 0, 0, 4}, {nullptr, -1, 0, 0, 0}});  // no bytes: nothing
  CHECK(rows.segments().size() == 2);
  CHECK(rows.rows().size() == 1);
  CHECK(rows.size() == 13);
}
