#include "daemon/store/read_ahead.h"

#include <catch2/catch.hpp>

#include <tuple>
#include <vector>

namespace ptcfs {
namespace {

using Asked = std::vector<std::tuple<int, uint64_t, uint64_t>>;

TEST_CASE("read ahead asks for exactly the pages of a strided read, nothing for a contiguous one") {
  Asked asked;
  {
    ReadAhead ra([&](int fd, uint64_t off, uint64_t len) { asked.emplace_back(fd, off, len); });
    // A strided slice: 8 KiB of every 32 KiB row of blob 5, three rows.
    ra.add(5, 8192, 8192);
    ra.add(5, 8192 + 32768, 8192);
    ra.add(5, 8192 + 2 * 32768, 8192);
    // Pieces inside one page, and one that touches it: one contiguous range of blob 7, left to
    // the kernel's readahead; empty pieces count for nothing.
    ra.add(7, 100, 10);
    ra.add(7, 200, 10);
    ra.add(7, 4096, 4096);
    ra.add(7, 9000, 0);
    // Blob 9: one range, then blob 11, then blob 9 again: strided.
    ra.add(9, 0, 1);
    ra.add(11, 0, 65536);
    ra.add(9, 12288, 1);
  }  // the destructor asks
  CHECK(asked == Asked{{5, 8192, 8192}, {5, 40960, 8192}, {5, 73728, 8192}, {9, 0, 4096}, {9, 12288, 4096}});
}

TEST_CASE("read ahead rounds pieces out to whole pages, and flush starts afresh") {
  Asked asked;
  ReadAhead ra([&](int fd, uint64_t off, uint64_t len) { asked.emplace_back(fd, off, len); });
  ra.add(3, 4095, 2);  // two pages
  ra.add(3, 16384, 1);
  ra.flush();
  ra.flush();             // nothing more
  ra.add(3, 8192, 4096);  // alone after the flush: contiguous
  ra.flush();
  CHECK(asked == Asked{{3, 0, 8192}, {3, 16384, 4096}});
}

}  // namespace
}  // namespace ptcfs
