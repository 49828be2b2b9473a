// A fresh directory under /tmp for a test, removed with everything in it at the end.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

namespace ptcfs::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ptcfs-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ptcfs::testing
