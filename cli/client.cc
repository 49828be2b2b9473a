#include "cli/client.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include "transport/auth.h"

namespace ptcfs::cli {

int fail(const Status& s) {
  fmt::print(stderr, "ptcfs: error: {}\n", s.message());
  return 1;
}

Result<nlohmann::json> call(const Globals& g, const nlohmann::json& req, const transport::ProgressSink& progress) {
  std::string secret;
  if (!g.secret_file.empty()) {
    PTC_ASSIGN_OR_RETURN(secret, transport::read_secret_file(g.secret_file));
  }
  PTC_ASSIGN_OR_RETURN(auto client, transport::RpcClient::connect(g.daemon, secret, {},
                                                                  "(is ptcfsd running? set --daemon or PTCFS_DAEMON)"));
  return client->call(req, progress);
}

Result<std::string> read_text_file(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return invalid(path + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid(path + ": cannot open: " + std::strerror(errno));
  // At most max_bytes + 1 bytes are read: /dev/zero or a huge file is refused at once.
  std::string text;
  char buf[1 << 16];
  while (in && text.size() <= max_bytes) {
    in.read(buf, sizeof buf);
    text.append(buf, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return invalid(path + ": cannot read: " + std::strerror(errno));
  if (text.size() > max_bytes)
    return invalid(path + ": more than " + std::to_string(max_bytes >> 20) + " MiB; not a file this command reads");
  return text;
}

int print_json(const nlohmann::json& j) {
  fmt::print("{}\n", j.dump(2));
  return 0;
}

}  // namespace ptcfs::cli
