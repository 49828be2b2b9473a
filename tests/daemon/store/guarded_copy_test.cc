// Copies out of a mapping survive the file being cut short under them.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <string>

#include "daemon/store/guarded_copy.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;

TEST_CASE("a copy from pages past the end of a truncated file returns false", "[guarded_copy]") {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/f";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  const std::string bytes(3 * 4096, 'z');
  REQUIRE(::pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  void* map = ::mmap(nullptr, bytes.size(), PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(map != MAP_FAILED);
  const char* src = static_cast<const char*>(map);

  std::string a(100, '\0'), b(100, '\0');
  CopyRun runs[] = {{a.data(), src + 10, 100}, {b.data(), src + 2 * 4096 + 5, 100}};
  CHECK(copy_guarded(runs, 2));
  CHECK(a == std::string(100, 'z'));
  CHECK(b == std::string(100, 'z'));

  REQUIRE(::ftruncate(fd, 4096) == 0);  // the third page is now past the end
  CHECK_FALSE(copy_guarded(runs, 2));
  CHECK(copy_guarded(runs, 1));  // and the guard is ready again
  CHECK_FALSE(copy_guarded(runs + 1, 1));
  ::munmap(map, bytes.size());
  ::close(fd);
}
