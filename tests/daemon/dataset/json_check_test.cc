// The fast JSON check decides as nlohmann::json::accept does, and accepts nothing nlohmann
// refuses: fixed cases at the edges of the grammar, then random damage to valid records.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/dataset/json_check.h"

using namespace ptcfs;

namespace {

bool nlohmann_accepts(const std::string& t) { return nlohmann::json::accept(t.begin(), t.end()); }

}  // namespace

TEST_CASE("the fast check accepts the records datasets hold", "[json_check]") {
  const std::vector<std::string> valid = {
      R"({"id": 1, "text": "abcdefghijklmnopqrstuvwxyz abcdefghijklmnopqrstuvwxyz"})",
      R"({})",
      R"([])",
      R"(  {"a" : [1, -2, 3.25, 0, -0.5, true, false, null, "x"], "b": {"c": {}}}  )",
      "{\"tab\\tand\\nnewline\\\\ \\\" \\/ \\b \\f \\r\": \"\\u00e9\\u20AC\"}\r",
      "{\"utf8\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf \xef\xbf\xbf \xf4\x8f\xbf\xbf\"}",
      "\"a string of more than sixteen bytes \x7f with DEL\"",
      "12345678901234567890",
      "-0.000001",
      "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
  };
  for (const auto& t : valid) {
    INFO(t);
    CHECK(json_valid_fast(t));
    CHECK(nlohmann_accepts(t));
    CHECK(json_valid(t));
  }
}

TEST_CASE("records at the edges of the grammar are decided as nlohmann decides", "[json_check]") {
  const std::vector<std::string> cases = {"",
                                          " ",
                                          "{",
                                          "}",
                                          "{\"a\"}",
                                          "{\"a\":}",
                                          "{\"a\":1,}",
                                          "[1,]",
                                          "[,1]",
                                          "{1:2}",
                                          "{\"a\":1 \"b\":2}",
                                          "01",
                                          "-",
                                          "1.",
                                          ".5",
                                          "+1",
                                          "1e5",
                                          "1E+400",
                                          "-1e-400",
                                          "1.5e3",
                                          "NaN",
                                          "Infinity",
                                          "tru",
                                          "truex",
                                          "nul",
                                          "{} {}",
                                          "1 2",
                                          "\"unterminated",
                                          "\"ctrl \x01 byte\"",
                                          "\"bad \\x escape\"",
                                          "\"\\u12\"",
                                          "\"\\uZZZZ\"",
                                          "\"\\ud83d\\ude00\"",
                                          "\"\\ud83d\"",
                                          "\"\\ude00\"",
                                          "\"\\uDFFF x\"",
                                          "\"\\uD7FF\"",
                                          "\"\xc0\xaf\"",
                                          "\"\xc1\xbf\"",
                                          "\"\xe0\x80\xaf\"",
                                          "\"\xed\xa0\x80\"",
                                          "\"\xf0\x80\x80\xaf\"",
                                          "\"\xf4\x90\x80\x80\"",
                                          "\"\xf5\x80\x80\x80\"",
                                          "\"\xff\"",
                                          "\"\x80\"",
                                          "\"\xc3\"",
                                          "\"\xe2\x82\"",
                                          "\"a\xf0\x9f\x98\"",
                                          "\xef\xbb\xbf{}",
                                          "\xef\xbb{}",
                                          std::string("\"nul \0 byte\"", 12),
                                          std::string("{}\0", 3),
                                          "{\"a\":1}\n",
                                          "[1]\x0b",
                                          "/* c */ 1",
                                          std::string(400, '1'),
                                          "-" + std::string(299, '9'),
                                          "0." + std::string(298, '5'),
                                          std::string(70, '[') + std::string(70, ']'),
                                          std::string(70, '[') + std::string(69, ']')};
  for (const auto& t : cases) {
    INFO(t);
    const bool expected = nlohmann_accepts(t);
    CHECK(json_valid(t) == expected);
    if (json_valid_fast(t)) CHECK(expected);
  }
}

TEST_CASE("damaged records are decided as nlohmann decides", "[json_check]") {
  const std::vector<std::string> seeds = {
      R"({"id": 17, "text": "the quick brown fox jumps over the lazy dog", "score": -0.25, "tags": ["a", "b"]})",
      "{\"t\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\", \"e\": \"\\u00e9\\n\", \"n\": [null, true, false, 0]}",
  };
  const std::string alphabet = std::string("{}[]\":,\\/ \t\r\n-+.0123456789eEtrufalsnbxu") +
                               std::string("\x00\x01\x7f\x80\xbf\xc3\xe2\xed\xf0\xf4\xff", 11);
  std::mt19937 rng(27);
  int fast_accepted = 0;
  for (int n = 0; n < 40000; ++n) {
    std::string t = seeds[n % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !t.empty(); ++e) {
      const size_t at = rng() % t.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          t[at] = c;
          break;
        case 1:
          t.insert(t.begin() + static_cast<ptrdiff_t>(at), c);
          break;
        default:
          t.erase(at, 1);
          break;
      }
    }
    INFO(t);
    const bool expected = nlohmann_accepts(t);
    REQUIRE(json_valid(t) == expected);
    if (json_valid_fast(t)) {
      REQUIRE(expected);
      ++fast_accepted;
    }
  }
  CHECK(fast_accepted > 1000);  // the damage left many records valid, and the fast check saw them
}
