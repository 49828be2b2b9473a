// Catch2 main for the unit tests: the library's info logs are silenced so that test
// output shows only failures.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "ptc/base/log.h"

int main(int argc, char** argv) {
  ptcfs::log::set_level(ptcfs::log::Level::kWarn);
  return Catch::Session().run(argc, argv);
}
