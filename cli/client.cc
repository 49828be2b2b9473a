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

int fail(const ptc::Status& s) {
  fmt::print(stderr, "ptcfs: error: {}\n", s.message());
  return 1;
}

ptc::Result<nlohmann::json> call(const Globals& g, const nlohmann::json& req, const transport::ProgressSink& progress) {
  std::string secret;
  if (!g.secret_file.empty()) {
    PTC_ASSIGN_OR_RETURN(secret, transport::read_secret_file(g.secret_file));
  }
  PTC_ASSIGN_OR_RETURN(auto client, transport::RpcClient::connect(g.daemon, secret, {},
                                                                  "(is ptcfsd running? set --daemon or PTCFS_DAEMON)"));
  return client->call(req, progress);
}

ptc::Result<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return ptc::invalid(path + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return ptc::invalid(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return ptc::invalid(path + ": cannot read: " + std::strerror(errno));
  return text.str();
}

int print_json(const nlohmann::json& j) {
  fmt::print("{}\n", j.dump(2));
  return 0;
}

}  // namespace ptcfs::cli
