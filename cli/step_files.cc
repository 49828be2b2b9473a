#include "cli/step_files.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include "ptc/formats/rank_file.h"
#include "ptc/formats/safetensors.h"
#include "ptc/layout.h"
#include "ptc/model.h"

namespace ptcfs::cli {

namespace {

Result<OpenFile> open_in(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  Fd in{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0 && errno == ENOENT) return not_found(path + ": no such file");
  if (in.fd < 0) return io_error("opening " + path, errno);
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) return io_error(path, errno);
  return OpenFile{name, std::move(in), static_cast<uint64_t>(st.st_size)};
}

// The step's ptc.json and every rank file of the layout it states, all open before a byte is
// copied: an open view keeps the version it opened, whatever commits meanwhile. Each rank
// file's header is checked against that layout, so that a repartition that switched the
// mount between two opens shows (kFailedPrecondition: a rank file of the layout missing, or
// one that does not match it) instead of being written out as a mix of two layouts; any other
// error is returned as it is.
Result<std::vector<OpenFile>> open_step(const std::string& dir) {
  std::vector<OpenFile> files;
  PTC_ASSIGN_OR_RETURN(OpenFile pj, open_in(dir, "ptc.json"));
  std::string text(pj.size, '\0');
  if (::pread(pj.fd.fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    return io_error("reading " + dir + "/ptc.json", errno);
  PTC_ASSIGN_OR_RETURN(const ptc::Ptc ptc, ptc::parse_ptc_json(text, dir + "/ptc.json"));
  PTC_ASSIGN_OR_RETURN(const ptc::Layout layout, ptc::Layout::make(ptc, ptc.parallelism));
  files.push_back(std::move(pj));
  for (const ptc::ShardId& shard : layout.shards()) {
    const std::string name = fmt::format("tp{}-pp{}.safetensors", shard.t, shard.p);
    auto f = open_in(dir, name);
    if (!f && f.status().code() == Code::kNotFound) return error(Code::kFailedPrecondition, f.status().message());
    if (!f) return f.status();
    const int fd = f->fd.fd;
    auto header = formats::read_safetensors_header(
        f->size,
        [fd](uint64_t off, void* buf, size_t len) -> Result<size_t> {
          const ssize_t n = ::pread(fd, buf, len, static_cast<off_t>(off));
          if (n < 0) return io_error("reading", errno);
          return static_cast<size_t>(n);
        },
        dir + "/" + name);
    if (!header) return header.status();
    if (auto m = formats::match_rank_header(layout, shard, *header, dir + "/" + name); !m)
      return error(Code::kFailedPrecondition, m.status().message());
    files.push_back(std::move(*f));
  }
  std::sort(files.begin(), files.end(), [](const OpenFile& a, const OpenFile& b) { return a.name < b.name; });
  return files;
}

// The names of the regular files directly in `dir`, sorted.
Result<std::vector<std::string>> file_names(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) names.push_back(it->path().filename().string());
  if (ec) return error(ec.value() == ENOENT ? Code::kNotFound : Code::kIo, dir + ": " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Result<std::vector<OpenFile>> open_view_files(const std::string& dir) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    PTC_ASSIGN_OR_RETURN(const auto names, file_names(dir));
    std::vector<OpenFile> files;
    for (const auto& name : names) {
      PTC_ASSIGN_OR_RETURN(OpenFile f, open_in(dir, name));
      files.push_back(std::move(f));
    }
    // The names follow the layout's shards: the same names, the same layout (a change of dp only).
    PTC_ASSIGN_OR_RETURN(const auto again, file_names(dir));
    if (again == names) return files;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return error(Code::kFailedPrecondition,
               "the files of " + dir + " changed while export opened them (a repartition?); 5 tries");
}

Result<std::vector<OpenFile>> open_step_files(const std::string& dir) {
  // A repartition that commits while the files are opened: opened again, from ptc.json.
  Result<std::vector<OpenFile>> opened = internal("not opened");
  for (int attempt = 0; attempt < 5; ++attempt) {
    opened = open_step(dir);
    if (opened || opened.status().code() != Code::kFailedPrecondition) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!opened && opened.status().code() == Code::kFailedPrecondition)
    return opened.status().with_context("the step changed while export opened its files (a repartition?); 5 tries");
  return opened;
}

}  // namespace ptcfs::cli
