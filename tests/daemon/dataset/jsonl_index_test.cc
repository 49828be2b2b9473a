// JSONL files scanned in chunks on several threads give exactly the samples, line numbers and
// errors of a scan line by line, wherever the chunk boundaries fall.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/dataset/jsonl_index.h"
#include "tests/daemon/temp_dir.h"

using namespace ptcfs;

namespace {

using testing::TempDir;

struct Files {
  std::vector<File> files;
  std::vector<JsonlInput> inputs;
};

Files open_files(const TempDir& tmp, const std::vector<std::string>& contents) {
  Files out;
  for (size_t i = 0; i < contents.size(); ++i) {
    const std::string path = tmp.path() + "/f" + std::to_string(i) + ".jsonl";
    std::ofstream(path, std::ios::binary) << contents[i];
    auto f = File::open_read(path);
    REQUIRE(f.is_ok());
    out.files.push_back(std::move(f).value());
  }
  for (size_t i = 0; i < contents.size(); ++i) out.inputs.push_back({&out.files[i], contents[i].size()});
  return out;
}

// The samples a line-by-line scan finds (every content valid).
std::vector<SampleRecord> by_line(const std::vector<std::string>& contents) {
  std::vector<SampleRecord> out;
  for (size_t f = 0; f < contents.size(); ++f) {
    const std::string& s = contents[f];
    for (size_t start = 0; start < s.size();) {
      const size_t nl = s.find('\n', start);
      const size_t end = nl == std::string::npos ? s.size() : nl + 1;
      const std::string line = s.substr(start, (nl == std::string::npos ? s.size() : nl) - start);
      if (line.find_first_not_of(" \t\r") != std::string::npos)
        out.push_back({start, end - start, static_cast<uint32_t>(f), nl == std::string::npos ? kSupplyNewline : 0});
      start = end;
    }
  }
  return out;
}

bool same(const std::vector<SampleRecord>& a, const std::vector<SampleRecord>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].offset != b[i].offset || a[i].bytes != b[i].bytes || a[i].file != b[i].file || a[i].flags != b[i].flags)
      return false;
  return true;
}

std::string record(int i) {
  return "{\"id\": " + std::to_string(i) + ", \"text\": \"" + std::string(static_cast<size_t>(i * 37 % 90), 'x') +
         "\"}";
}

}  // namespace

TEST_CASE("chunked scans find every line wherever the chunks end", "[jsonl_index]") {
  std::string many;
  for (int i = 0; i < 300; ++i) many += record(i) + (i % 7 == 0 ? "\r\n" : "\n") + (i % 11 == 0 ? "\n  \t\n" : "");
  std::string small, left;
  for (int i = 0; i < 10000; ++i) small += i % 3 ? "{}\n" : "[" + std::to_string(i) + "]\n";
  for (int i = 0; i < 40; ++i)
    left += i % 2 ? "{\"e\": 1e" + std::to_string(i) + "}\n" : "[\"\\u00e9\", " + record(i) + "]\n";
  const std::vector<std::vector<std::string>> datasets = {
      {"{\"a\":0}\n\n{\"a\":1}\n  \n{\"a\":22}"},         // blank lines, no final newline
      {"{\"a\":0}\r\n{\"b\":[1,2]}\r\n"},                 // CRLF
      {"\n\n\n{}\n"},                                     // leading empty lines
      {"{}"},                                             // one line, no newline
      {"[\"" + std::string(5000, 'y') + "\"]\n{}\n[1]"},  // a line longer than many chunks
      {many},
      {"", "{}\n", "[1]", "\n", many, "{\"z\": null}\n\n"},  // many files, empty ones too
      {small},                                               // more samples in a chunk than one guarded pass takes
      {left},                                                // lines the fast checker leaves to nlohmann, all valid
  };
  TempDir tmp;
  for (const auto& contents : datasets) {
    Files files = open_files(tmp, contents);
    const auto expected = by_line(contents);
    for (uint64_t chunk : {1, 2, 3, 7, 64, 1000, 8 << 20})
      for (unsigned threads : {1u, 3u})
        for (bool map : {true, false}) {
          if (contents[0] == small && chunk < 64) continue;  // 30,000 one-byte chunks say nothing more
          INFO("chunk " << chunk << ", threads " << threads << ", mapped " << map << ", first file "
                        << contents[0].substr(0, 40));
          std::vector<SampleRecord> got;
          uint64_t advanced = 0;
          REQUIRE(
              index_jsonl_files(files.inputs, got, [&](uint64_t n) { advanced += n; }, {chunk, threads, map}).is_ok());
          CHECK(same(got, expected));
          uint64_t total = 0;
          for (const auto& c : contents) total += c.size();
          CHECK(advanced == total);
        }
  }
}

TEST_CASE("a line whose newline falls at either side of a read's end is indexed exactly", "[jsonl_index]") {
  // Unmapped, a chunk of 4096 bytes is read, then read on (64 KiB, then twice as much each
  // time) until its last line ends: reads end at 4096, 4096 + 2^16 and 4096 + 2^16 + 2^17.
  const uint64_t ends[] = {4096, 4096 + (1 << 16), 4096 + (1 << 16) + (1 << 17)};
  TempDir tmp;
  for (uint64_t read_end : ends)
    for (uint64_t newline : {read_end - 1, read_end}) {
      const std::string line = "[\"" + std::string(newline - 4, 'y') + "\"]";  // its '\n' at `newline`
      REQUIRE(line.size() == newline);
      Files files = open_files(tmp, {line + "\n{}\n[1]"});
      for (unsigned threads : {1u, 2u})
        for (bool map : {true, false}) {
          INFO("newline at " << newline << ", threads " << threads << ", mapped " << map);
          std::vector<SampleRecord> got;
          REQUIRE(index_jsonl_files(files.inputs, got, {}, {4096, threads, map}).is_ok());
          REQUIRE(got.size() == 3);
          CHECK((got[0].offset == 0 && got[0].bytes == newline + 1 && got[0].file == 0 && got[0].flags == 0));
          CHECK((got[1].offset == newline + 1 && got[1].bytes == 3 && got[1].flags == 0));
          CHECK((got[2].offset == newline + 4 && got[2].bytes == 3 && got[2].flags == kSupplyNewline));
        }
    }
}

TEST_CASE("unmapped, a chunk reads on only until its last line ends", "[jsonl_index]") {
  // 3,600 lines of 1,000 bytes (the '\n' included) in chunks of 1 MiB: every chunk's end but the
  // file's falls inside a line (2^20 is no multiple of 1,000). A chunk reads its bytes and the one
  // before it, then on past its end, 64 KiB at first and no further than the file, until its last
  // line's '\n'; every line here ends within the first read on, so the bytes read are exactly:
  const uint64_t kLine = 1000, kChunk = 1 << 20, kReadOn = 64 << 10, size = 3600 * kLine;
  std::string text;
  for (uint64_t i = 0; i < size / kLine; ++i) {
    const std::string head = "{\"id\": " + std::to_string(i) + ", \"t\": \"";
    text += head + std::string(kLine - head.size() - 3, 'x') + "\"}\n";
  }
  REQUIRE(text.size() == size);
  const uint64_t expected = (kChunk + kReadOn)          // [0, 2^20), then 64 KiB
                            + (1 + kChunk + kReadOn)    // [2^20 - 1, 2^21), then 64 KiB
                            + (1 + kChunk + kReadOn)    // [2^21 - 1, 3 * 2^20), then 64 KiB
                            + (1 + size - 3 * kChunk);  // [3 * 2^20 - 1, size): ends with a '\n'
  REQUIRE(expected == 3'796'611);
  TempDir tmp;
  Files files = open_files(tmp, {text});
  const auto want = by_line({text});
  REQUIRE(want.size() == 3600);
  for (unsigned threads : {1u, 3u})
    for (bool map : {true, false}) {
      INFO("threads " << threads << ", mapped " << map);
      std::atomic<uint64_t> bytes_read{0};
      std::vector<SampleRecord> got;
      REQUIRE(index_jsonl_files(files.inputs, got, {}, {kChunk, threads, map, &bytes_read}).is_ok());
      CHECK(same(got, want));
      CHECK(bytes_read.load() == (map ? 0 : expected));
    }
}

TEST_CASE("the first line that is not JSON is named by file and line, wherever the chunks end", "[jsonl_index]") {
  TempDir tmp;
  std::string second;
  for (int i = 0; i < 50; ++i) second += record(i) + "\n";
  second += "\n{\"broken\": }\n" + record(1) + "\n{not json}\n";  // lines 51, 52 (blank, broken), 54
  Files files = open_files(tmp, {"{}\n[1]\n", second});
  for (uint64_t chunk : {1, 5, 64, 4096})
    for (unsigned threads : {1u, 2u, 4u})
      for (bool map : {true, false}) {
        INFO("chunk " << chunk << ", threads " << threads << ", mapped " << map);
        std::vector<SampleRecord> got;
        auto s = index_jsonl_files(files.inputs, got, {}, {chunk, threads, map});
        CHECK(s.code() == Code::kCorrupt);
        CHECK(s.message() == files.files[1].path() + ": line 52 is not valid JSON");
      }
}

TEST_CASE("a file shorter than when it was sized is refused", "[jsonl_index]") {
  TempDir tmp;
  Files files = open_files(tmp, {"{}\n{}\n"});
  files.inputs[0].size = 100;
  for (bool map : {true, false}) {
    std::vector<SampleRecord> got;
    auto s = index_jsonl_files(files.inputs, got, {}, {16, 2, map});
    CHECK(s.code() == Code::kCorrupt);
    CHECK(s.message() == files.files[0].path() + ": shorter than its size while it was read (changed meanwhile?)");
  }
}

TEST_CASE("a file cut short under its mapping, pages before its size gone, is refused", "[jsonl_index]") {
  // Its size as indexed is 5 pages; then it is cut to one, so the scan of its mapping meets
  // pages the file no longer has (SIGBUS, caught) or, in the last page, zeros.
  TempDir tmp;
  std::string text;
  while (text.size() < 5 * 4096) text += record(static_cast<int>(text.size() % 97)) + "\n";
  Files files = open_files(tmp, {text});
  REQUIRE(::truncate(files.files[0].path().c_str(), 4096) == 0);
  for (uint64_t chunk : {1000, 4096, 8 << 20})
    for (unsigned threads : {1u, 2u}) {
      INFO("chunk " << chunk << ", threads " << threads);
      std::vector<SampleRecord> got;
      auto s = index_jsonl_files(files.inputs, got, {}, {chunk, threads, true});
      CHECK(s.code() == Code::kCorrupt);
      CHECK(s.message() == files.files[0].path() + ": shorter than its size while it was read (changed meanwhile?)");
    }
}
