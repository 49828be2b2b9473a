// Checks of command-line values shared by the commands.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ptcfs::cli {

// Refuses a negative number before CLI11 converts it (an unsigned option would otherwise
// wrap "-5" to nearly 2^64).
inline CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const auto first = v.find_first_not_of(" \t");
        if (first != std::string::npos && v[first] == '-') return "must not be negative (got " + v + ")";
        return "";
      },
      "NUMBER >= 0");
}

}  // namespace ptcfs::cli
