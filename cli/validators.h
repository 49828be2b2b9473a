// Checks of command-line values shared by the commands.
#pragma once

#include <CLI/CLI.hpp>

#include <exception>
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

// A whole number of at least 1, said plainly (CLI::PositiveNumber prints its range up to DBL_MAX:
// "Value 0 not in range 0.000000 to 1797...", 309 digits).
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        size_t used = 0;
        long long n = 0;
        try {
          n = std::stoll(v, &used);
        } catch (const std::exception&) {
          return "must be a whole number of at least 1 (got " + v + ")";
        }
        if (used != v.size() || n < 1) return "must be a whole number of at least 1 (got " + v + ")";
        return "";
      },
      "NUMBER >= 1");
}

}  // namespace ptcfs::cli
